"""A summary writer that fails mid-run (its tracking store gone, a server down) never stops the
training: one warning naming the writer, the run finishes and exits 0, every checkpoint and
every metrics.csv row is written, and the other writers of a list go on (writers/guarded.py)."""
import csv
import shutil

import pytest

from conftest import tiny_cfg
from up_trainer import Hook
from up_trainer.api import train

pytest.importorskip("mlflow")


class StoreGoesAway(Hook):
    """Deletes the MLflow store after epoch 1, as a tracking server that dies mid-run."""

    def __init__(self, store):
        super().__init__()
        self.store = store

    def after_epoch(self, trainer, epoch):
        if epoch == 1:
            shutil.rmtree(self.store)


def test_tracking_store_lost_mid_run(tmp_path):
    writers = ["tensorboard", "mlflow"]  # mlflow alone goes through the same KeptWriter
    logger = {"type": "train_val_logger", "kwargs": {"freq": 2, "summary_writer": writers, "plot": False,
                                                     "progress_bar": False}}
    cfg = tiny_cfg(trainer={"max_epoch": 2}, hooks=[logger],
                   dataset={"train": {"type": "digits", "kwargs": {"split": "train", "subset": 32}},
                            "test": {"type": "digits", "kwargs": {"split": "test", "subset": 16}},
                            "batch_size": 16, "test_batch_size": 16})
    run = tmp_path / "run"
    result = train(cfg, work_dir=run, hooks=[StoreGoesAway(run / "log" / "mlruns")])
    assert result.epoch == 2
    assert sorted(p.name for p in (run / "checkpoints").glob("ckpt_e*.pth")) == ["ckpt_e1.pth", "ckpt_e2.pth"]
    with open(run / "metrics.csv", newline="") as f:
        assert [row["epoch"] for row in csv.DictReader(f)][-1] == "2"
    log = (run / "train.log").read_text()
    warnings = [line for line in log.splitlines() if "summary writer mlflow failed" in line]
    assert len(warnings) == 1, log  # once, then the writer is left alone
    assert "Traceback" not in log
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "log"))  # TensorBoard got epoch 2's evaluation after MLflow failed
    acc.Reload()
    tags = [t for t in acc.Tags()["scalars"] if t.startswith("metrics/")]
    assert tags and max(e.step for e in acc.Scalars(tags[0])) == 2
