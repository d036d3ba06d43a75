"""TensorBoard, MLflow and Weights & Biases in one run (``summary_writer: [tensorboard,
mlflow, wandb]``), each read back from its own files: TensorBoard's EventAccumulator, MLflow's
client on the local store, and W&B's offline run file (read below: W&B ships no Python reader
for it, and offline is the only mode here, with no network)."""
import glob
import json
import os

import pytest

import up_trainer
from api_helpers import fast_cfg, process_state, changed

pytest.importorskip("mlflow")
pytest.importorskip("wandb")

WRITERS = ["tensorboard", "mlflow", "wandb"]


def wandb_records(path):
    """The protobuf records of a W&B run file (``run-<id>.wandb``): a 7-byte header (``:W&B``,
    magic, version), then LevelDB's log format: 32 KiB blocks of chunks, each with a 7-byte
    header (checksum, little-endian length, type: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, parts, block = 7, [], 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 2):
            parts = [chunk]
        elif kind in (3, 4):
            parts.append(chunk)
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            yield record


def wandb_run(logdir):
    (path,) = glob.glob(os.path.join(logdir, "wandb", "offline-run-*", "run-*.wandb"))
    history, config, artifacts = [], {}, []
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "artifact":
            artifacts.append(record.artifact)
    return history, config, artifacts, os.path.dirname(path)


def same(a, b):
    """(step, value) lists: the same steps, values equal to float32 precision (TensorBoard's)."""
    return [s for s, _ in a] == [s for s, _ in b] and [v for _, v in a] == pytest.approx([v for _, v in b], rel=1e-6)


@pytest.fixture(scope="module")
def three_writer_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("writers")
    logger = {"type": "train_val_logger", "kwargs": {
        "freq": 2, "summary_writer": WRITERS,
        "writer_kwargs": {"mlflow": {"experiment": "digits"}, "wandb": {"mode": "offline", "log_checkpoint": True}}}}
    before = process_state()
    result = up_trainer.train(fast_cfg(trainer={"max_epoch": 2}, hooks=[logger]), work_dir=tmp / "run")
    return result, changed(before, process_state())


def test_the_run_leaves_no_process_thread_or_file_open(three_writer_run):
    """W&B's service process and threads end with the run."""
    assert three_writer_run[1] == []


def test_all_three_writers_hold_the_same_numbers(three_writer_run):
    from mlflow.tracking import MlflowClient

    from test_logger import read_events

    result, _ = three_writer_run
    logdir = os.path.join(result.run_dir, "log")
    tb = read_events(logdir)
    assert [s for s, _ in tb["train/loss"]] == list(range(2, result.iteration + 1, 2))
    assert [s for s, _ in tb["metrics/top1"]] == [1, 2]

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri="file://" + os.path.join(logdir, "mlruns"))
    run_id = open(os.path.join(logdir, "mlflow_run_id")).read().strip()
    ml_loss = [(m.step, m.value) for m in client.get_metric_history(run_id, "train/loss")]
    ml_top1 = [(m.step, m.value) for m in client.get_metric_history(run_id, "metrics/top1")]
    assert same(ml_loss, tb["train/loss"]) and same(ml_top1, tb["metrics/top1"])

    history, config, artifacts, _ = wandb_run(logdir)
    wb_loss = [(h["iteration"], h["train/loss"]) for h in history if "train/loss" in h]
    wb_top1 = [(h["epoch"], h["metrics/top1"]) for h in history if "metrics/top1" in h]
    assert same(wb_loss, tb["train/loss"]) and same(wb_top1, tb["metrics/top1"])
    assert result.metrics["top1"] == pytest.approx(wb_top1[-1][1])


def test_wandb_gets_the_config_the_pictures_and_the_best_checkpoint(three_writer_run):
    result, _ = three_writer_run
    history, config, artifacts, run_dir = wandb_run(os.path.join(result.run_dir, "log"))
    assert config["trainer"]["max_epoch"] == 2 and config["net"]["type"] == "tiny_convnet"
    pictures = {k[:-len("/_type")] for h in history for k, v in h.items() if k.endswith("/_type") and v == "image-file"}
    assert pictures == {"insight/confusion_matrix", "insight/confidently_wrong", "files/results.png",
                        "files/confusion_matrix.png", "files/confidently_wrong.png"}, pictures
    insight_steps = [h["epoch"] for h in history if "insight/confusion_matrix/_type" in h]
    assert insight_steps == [1, 2]  # every evaluation's pictures, at its epoch
    assert [a.type for a in artifacts] == ["model"]
    assert [os.path.basename(f.path) for f in artifacts[0].manifest.contents] == ["ckpt_best.pth"]
    assert glob.glob(os.path.join(run_dir, "files", "media", "images", "insight", "*.png"))


def test_a_missing_writer_is_one_line(tmp_path, monkeypatch):
    """The optional package absent: one ConfigError naming the writer and its extra."""
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb" or name.startswith("wandb."):
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    logger = {"type": "train_val_logger", "kwargs": {"summary_writer": ["tensorboard", "wandb"]}}
    with pytest.raises(up_trainer.ConfigError) as info:
        up_trainer.train(fast_cfg(trainer={"max_epoch": 1}, hooks=[logger]), work_dir=tmp_path)
    assert "wandb writer unavailable" in str(info.value) and "up-trainer[wandb]" in str(info.value)


@pytest.mark.parametrize("kwargs, path, words", [
    ({"summary_writer": ["tensorboard", "tensorboard"]}, "summary_writer[1]", "listed twice"),
    ({"summary_writer": ["tensorboard", "wandbb"]}, "summary_writer[1]", "did you mean 'wandb'"),
    ({"summary_writer": ["tensorboard"], "writer_kwargs": {"mlflow": {}}}, "writer_kwargs.mlflow", "names no writer"),
    ({"summary_writer": ["wandb"], "writer_kwargs": {"wandb": {"mode": "cloud"}}}, "writer_kwargs.wandb.mode",
     "not one of"),
    ({"summary_writer": []}, "summary_writer", "non-empty list"),
])
def test_writer_lists_are_checked_before_anything_runs(kwargs, path, words):
    logger = {"type": "train_val_logger", "kwargs": kwargs}
    with pytest.raises(up_trainer.ConfigError) as info:
        up_trainer.build_trainer(fast_cfg(hooks=[logger]))
    assert path in str(info.value.path) and words in str(info.value)
