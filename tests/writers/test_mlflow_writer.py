"""The mlflow summary writer: a real run written to a local store, read back with mlflow's client."""
import os

import pytest

from conftest import tiny_cfg, write_cfg

pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def mlflow_run(tmp_path_factory):
    from click.testing import CliRunner

    from up_trainer.cli import main

    tmp = tmp_path_factory.mktemp("mlflow")
    logger = {"type": "train_val_logger", "kwargs": {"freq": 2, "summary_writer": "mlflow",
                                                     "writer_kwargs": {"experiment": "digits"}}}
    cfg = tiny_cfg(trainer={"max_epoch": 2}, hooks=[logger],
                   dataset={"train": {"type": "digits", "kwargs": {"split": "train", "subset": 64}},
                            "test": {"type": "digits", "kwargs": {"split": "test", "subset": 32}},
                            "batch_size": 16, "test_batch_size": 32})
    path = write_cfg(tmp / "cfg.yaml", cfg)
    res = CliRunner().invoke(main, ["train", "--config", path, "--work-dir", str(tmp / "run")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri="file://" + str(tmp / "run" / "log" / "mlruns"))
    run_id = (tmp / "run" / "log" / "mlflow_run_id").read_text().strip()
    return client, client.get_run(run_id), tmp / "run"


def test_params_are_the_resolved_config(mlflow_run):
    client, run, _ = mlflow_run
    params = run.data.params
    assert params["net.type"] == "resnet18" and params["net.kwargs.num_classes"] == "10"
    assert params["trainer.max_epoch"] == "2" and params["dataset.train.kwargs.subset"] == "64"
    assert client.get_experiment(run.info.experiment_id).name == "digits"
    assert run.info.status == "FINISHED"


def test_metrics_per_step(mlflow_run):
    client, run, _ = mlflow_run
    loss = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in loss] == [2, 4, 6, 8]  # 4 iterations per epoch, a line every 2
    top1 = client.get_metric_history(run.info.run_id, "metrics/top1")
    assert [m.step for m in top1] == [1, 2] and all(0.0 <= m.value <= 100.0 for m in top1)


def test_best_checkpoint_and_plots_are_artifacts(mlflow_run):
    client, run, run_dir = mlflow_run
    files = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert "results.png" in files
    assert [f.path for f in client.list_artifacts(run.info.run_id, "checkpoints")] == ["checkpoints/ckpt_best.pth"]
    local = client.download_artifacts(run.info.run_id, "checkpoints/ckpt_best.pth", str(run_dir / "dl"))
    assert os.path.getsize(local) == os.path.getsize(run_dir / "checkpoints" / "ckpt_best.pth")


def test_secrets_in_the_config_are_redacted(tmp_path):
    from mlflow.tracking import MlflowClient

    from up_trainer.config.redact import redact
    from up_trainer.writers.mlflow import MlflowWriter

    w = MlflowWriter(logdir=str(tmp_path / "log"))
    w.add_config(redact({"hooks": [{"type": "x", "kwargs": {"token": "s3cret", "url": "https://u:pw@h/p"}}]}))
    w.add_scalar("metrics/bbox.AP.digit 3", 0.5, 1)  # a key MLflow accepts as it is
    w.close()
    run = MlflowClient(tracking_uri=w.tracking_uri).get_run(w.run_id)
    assert run.data.params["hooks.0.kwargs.token"] == "<redacted>"
    assert "pw" not in run.data.params["hooks.0.kwargs.url"]
    assert run.data.metrics == {"metrics/bbox.AP.digit 3": 0.5}
