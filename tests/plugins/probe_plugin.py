"""Loaded through runtime.imports (tests/plugins on PYTHONPATH): records what a run really used
(process group, DDP, device, memory format, cuDNN flags, peak CUDA memory) in a JSON file,
for tests that cannot see inside a training subprocess."""
import json

import torch
import torch.distributed as torch_dist

from up_trainer.hooks.base import Hook
from up_trainer.registry import HOOKS


@HOOKS.register("test_probe")
class TestProbe(Hook):
    """Test only: write facts about the run to ``path`` at before_train and after_train.

    ``max_memory_allocated``: the highest ``torch.cuda.max_memory_allocated`` read after the
    updates of iterations past ``peak_after_iter`` (dynamic memory_checkpoint resets the peak
    before each forward, so each read covers at least that iteration)."""

    priority = "LOWEST"  # after every other hook's after_update

    def __init__(self, path: str = "probe.json", peak_after_iter: int = 0):
        super().__init__()
        self.path = path
        self.peak_after_iter = peak_after_iter
        self.facts = {}
        self.peak = 0

    def before_train(self, trainer):
        module = trainer.module
        conv = next((m.weight for m in module.modules() if isinstance(m, torch.nn.Conv2d) and m.weight.shape[1] > 1), None)
        self.facts.update(
            backend=torch_dist.get_backend() if torch_dist.is_initialized() else None,
            world_size=trainer.dist.world_size,
            ddp=isinstance(trainer.model, torch.nn.parallel.DistributedDataParallel),
            device=str(next(module.parameters()).device),
            channels_last=None if conv is None else conv.is_contiguous(memory_format=torch.channels_last),
            cudnn_benchmark=torch.backends.cudnn.benchmark,
            pin_memory=trainer.loaders.cfg["pin_memory"],
        )
        if trainer.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.device)
        self._write()

    def after_update(self, trainer, iteration):
        if trainer.device.type == "cuda" and iteration > self.peak_after_iter:
            self.peak = max(self.peak, torch.cuda.max_memory_allocated(trainer.device))

    def after_train(self, trainer):
        self.facts["max_memory_allocated"] = self.peak if trainer.device.type == "cuda" else None
        self.facts["iter"] = trainer.state.iter
        self._write()

    def _write(self):
        with open(self.path, "w") as f:
            json.dump(self.facts, f)
