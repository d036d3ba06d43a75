"""Loaded through runtime.imports (with tests/plugins on PYTHONPATH) by tests/engine/test_dist.py.

dist_mlp: a BatchNorm-free, dropout-free MLP, so N ranks x batch B/N compute exactly the
gradient of 1 rank x batch B (up to float summation order).
test_pace: slows each iteration down and drops a marker file per rank once training has run
`at` iterations, so a test can signal or kill a rank mid-epoch at a known point.
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

from up_trainer.hooks.base import Hook
from up_trainer.registry import HOOKS, MODELS


@MODELS.register("dist_mlp")
class TestMLP(nn.Module):
    def __init__(self, in_features: int = 64, hidden: int = 32, num_classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, batch):
        logits = self.fc2(torch.tanh(self.fc1(batch["image"].flatten(1))))
        out = {"logits": logits}
        if "label" in batch:
            out["loss"] = F.cross_entropy(logits, batch["label"])
        if not self.training:
            out["scores"] = logits.softmax(dim=1)
        return out


@HOOKS.register("test_pace")
class TestPace(Hook):
    """Test only: sleep per iteration; write <marker_dir>/rank<R>.ready after `at` iterations."""

    def __init__(self, delay: float = 0.05, at: int = 3, marker_dir: str = "."):
        super().__init__()
        self.delay = delay
        self.at = at
        self.marker_dir = marker_dir

    def after_update(self, trainer, iteration):
        if iteration == self.at:
            os.makedirs(self.marker_dir, exist_ok=True)
            with open(os.path.join(self.marker_dir, f"rank{trainer.dist.rank}.ready"), "w") as f:
                f.write(str(os.getpid()))
        time.sleep(self.delay)
