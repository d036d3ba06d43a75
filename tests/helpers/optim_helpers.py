"""Tiny test-only models (registered once, imported by the optim test files) and configs."""
import torch.nn.functional as F
from torch import nn

from conftest import merge_sections
from up_trainer.engine.scalars import Scalars
from up_trainer.registry import MODELS


class _Classifier(nn.Module):
    def forward(self, batch):
        logits = self.backbone(batch["image"])
        out = {"logits": logits}
        if batch.get("label") is not None:
            out["loss"] = F.cross_entropy(logits, batch["label"])
        return out


@MODELS.register("test_mlp")
class TinyMLP(_Classifier):
    """Flatten -> Linear -> ReLU -> Linear: no BatchNorm, so batch splits change nothing."""

    def __init__(self, in_features: int = 64, hidden: int = 32, num_classes: int = 10):
        super().__init__()
        self.backbone = nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(),
                                      nn.Linear(hidden, num_classes))


@MODELS.register("test_cnn")
class TinyCNN(_Classifier):
    """Conv -> BatchNorm -> ReLU -> pool -> Linear: has buffers, for EMA/resume tests."""

    def __init__(self, channels: int = 8, num_classes: int = 10):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(4 * channels, num_classes))


def digits_cfg(net="test_mlp", train_subset=None, test_subset=96, batch_size=16, max_epoch=2, quiet=True,
               **sections):
    """A config on the digits dataset (8x8) with a tiny model; sections are merged shallowly.
    ``quiet`` drops the default logger hook (tensorboard + plots cost seconds per run)."""
    train_kwargs = {"split": "train"}
    if train_subset:
        train_kwargs["subset"] = train_subset
    cfg = {
        "runtime": {"seed": 5},
        "dataset": {"train": {"type": "digits", "kwargs": train_kwargs},
                    "test": {"type": "digits", "kwargs": {"split": "test", "subset": test_subset}},
                    "batch_size": batch_size, "test_batch_size": 128},
        "trainer": {"max_epoch": max_epoch, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9}}},
        "saver": {"save_dir": "checkpoints"},
        "net": {"type": net},
    }
    if quiet:
        cfg["default_hooks"] = {"logger": None}
    return merge_sections(cfg, sections)


def resolved(cfg, opts=()):
    """Validate an in-memory config the way `up` does (default hooks, shortcuts, opts)."""
    import os
    import tempfile

    import yaml

    from up_trainer.config import resolve_config

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "cfg.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        return resolve_config(path, opts)


def train_in_process(cfg, work_dir):
    """build_trainer + train without the CLI; returns the trainer."""
    from up_trainer.engine.builder import build_trainer

    trainer = build_trainer(resolved(cfg), work_dir=str(work_dir), device="cpu")
    trainer.train()
    return trainer


def fake_trainer(module, optim, epoch_len):
    """The attributes hooks read, around a real Optimization."""
    from types import SimpleNamespace

    from up_trainer.engine.state import TrainState

    st = TrainState()
    st.epoch_len = epoch_len
    return SimpleNamespace(module=module, model=module, optim=optim, state=st, did_update=False, ema=None,
                           scalars=Scalars())


