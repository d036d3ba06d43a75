"""empty_cache: give cached, unused GPU memory back to the driver at chosen points.

PyTorch's caching allocator keeps freed blocks for reuse; after evaluation (other shapes)
or with a fragmented cache, releasing them helps a process that shares the GPU or a
memory-hungry phase that follows. It costs a synchronisation and later re-allocation, so
per-iteration use (``freq``) is off by default. Without CUDA the hook does nothing.
"""
from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook


def empty_cuda_cache():
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        return True
    return False


@HOOKS.register("empty_cache")
class EmptyCache(Hook):
    """Release the CUDA caching allocator's unused memory (torch.cuda.empty_cache) at epoch/eval ends.

    freq: also every `freq` iterations (0: never per iteration). epoch_end: at the end of
    every epoch, before evaluation. after_eval: after every evaluation.
    """

    priority = "LOWEST"

    def __init__(self, freq: int = 0, epoch_end: bool = True, after_eval: bool = True):
        super().__init__()
        if freq < 0:
            raise ConfigError("freq", f"must be >= 0 (0 disables the per-iteration call), got {freq}")
        self.freq = freq
        self.epoch_end = epoch_end
        self.release_after_eval = after_eval
        self.calls = 0  # how often the cache was emptied (tests, diagnostics)

    def _empty(self):
        if empty_cuda_cache():
            self.calls += 1

    def after_update(self, trainer, iteration):
        if self.freq and iteration % self.freq == 0:
            self._empty()

    def after_epoch(self, trainer, epoch):
        if self.epoch_end:
            self._empty()

    def after_eval(self, trainer, metrics):
        if self.release_after_eval:
            self._empty()
