"""Start the worker function in one process, or in a process group (torchrun environment)."""
import os

import torch
import torch.distributed as torch_dist

from ..errors import ConfigError


def launch_workers(fn, kwargs, *, launch="none", ng=1, nm=1, port=None, runtime_cfg=None):
    if launch != "none":
        raise ConfigError("--launch", f"launch mode {launch!r} needs the distributed launcher, which this build lacks")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return fn(**kwargs)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    torch_dist.init_process_group(backend=backend)
    try:
        return fn(**kwargs)
    finally:
        torch_dist.destroy_process_group()
