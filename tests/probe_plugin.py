"""Loaded through runtime.imports (tests/ on PYTHONPATH): records what a run really used
(process group, DDP, device, memory format, cuDNN flags, peak CUDA memory) in a JSON file,
for tests that cannot see inside a training subprocess."""
import json

import torch
import torch.distributed as torch_dist

from up_trainer.hooks.base import Hook
from up_trainer.registry import HOOKS


@HOOKS.register("test_probe")
class TestProbe(Hook):
    """Test only: write facts about the run to ``path`` at before_train and after_train."""

    def __init__(self, path: str = "probe.json"):
        super().__init__()
        self.path = path
        self.facts = {}

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
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self._write()

    def after_train(self, trainer):
        if torch.cuda.is_available():
            self.facts["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        self.facts["iter"] = trainer.state.iter
        self._write()

    def _write(self):
        with open(self.path, "w") as f:
            json.dump(self.facts, f)
