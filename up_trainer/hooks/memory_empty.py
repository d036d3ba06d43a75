"""memory_empty (UP): every ``freq`` iterations, give cached CUDA memory back to the driver and
reset the peak-memory counters (so the logger's max memory is the peak since the last reset).
Without CUDA it does nothing. For release points at epoch ends and after evaluation, see
``empty_cache``."""
from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook
from .empty_cache import empty_cuda_cache


@HOOKS.register("memory_empty")
class MemoryEmpty(Hook):
    """Every `freq` iterations: torch.cuda.empty_cache() and reset the peak memory statistics (UP).

    freq: interval in iterations (UP's default 100).
    """

    priority = "LOWEST"

    def __init__(self, freq: int = 100):
        super().__init__()
        if freq < 1:
            raise ConfigError("freq", f"must be >= 1, got {freq}")
        self.freq = freq
        self.calls = 0

    def after_update(self, trainer, iteration):
        if iteration % self.freq == 0 and empty_cuda_cache():
            import torch

            torch.cuda.reset_peak_memory_stats()
            self.calls += 1
