"""sync_buffers: make every rank's model buffers (BatchNorm running statistics) rank 0's.

DDP broadcasts buffers at the start of each forward, so after the last forward of an epoch
the ranks' BatchNorm statistics differ by one update; with ``broadcast_buffers=False`` (or a
model updating buffers outside forward) they drift apart for good. Broadcasting from rank 0
at the end of every epoch, before evaluation and the checkpoint, makes the evaluation of
every rank use the same model as the checkpoint rank 0 writes. Without DDP it does nothing.
"""
from ..registry import HOOKS
from .base import Hook


def broadcast_buffers(module, src=0):
    """Broadcast every floating and integer buffer of ``module`` from ``src``; returns the count."""
    import torch.distributed as torch_dist

    buffers = [b for b in module.buffers()]
    for b in buffers:  # a few dozen small tensors per epoch: simple per-tensor collectives
        torch_dist.broadcast(b.data, src=src)
    return len(buffers)


@HOOKS.register("sync_buffers")
class SyncBuffers(Hook):
    """DDP: broadcast model buffers (BatchNorm statistics) from rank 0 at the end of every epoch."""

    priority = "NORMAL"

    def __init__(self):
        super().__init__()

    def after_epoch(self, trainer, epoch):
        if trainer.dist.enabled:
            broadcast_buffers(trainer.module)
