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


def average_buffers(module):
    """Replace every floating buffer of ``module`` by its mean over the ranks (UP's async_norm);
    integer buffers (BatchNorm's num_batches_tracked) are equal on every rank already."""
    import torch.distributed as torch_dist

    buffers = [b for b in module.buffers() if b.is_floating_point()]
    world = torch_dist.get_world_size()
    for b in buffers:
        torch_dist.all_reduce(b.data)
        b.data.div_(world)
    return len(buffers)


MODES = ("broadcast", "mean")


@HOOKS.register("sync_buffers")
class SyncBuffers(Hook):
    """DDP: at the end of every epoch make the ranks' model buffers (BatchNorm statistics) equal:
    rank 0's (mode broadcast) or their mean over the ranks (mode mean, UP's runtime.async_norm)."""

    priority = "NORMAL"

    def __init__(self, mode: str = "broadcast"):
        super().__init__()
        if mode not in MODES:
            from ..errors import ConfigError, did_you_mean

            raise ConfigError("mode", f"{mode!r} is not one of {', '.join(MODES)}", did_you_mean(mode, MODES))
        self.mode = mode

    def after_epoch(self, trainer, epoch):
        if trainer.dist.enabled:
            (average_buffers if self.mode == "mean" else broadcast_buffers)(trainer.module)
