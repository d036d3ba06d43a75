"""Speed levers of the ``runtime`` section: cuDNN autotuning, channels_last, torch.compile.

All are off by default: each changes numerics or start-up time in ways a user should choose
(see docs/speed.rst for what they were measured to give).
"""
import logging

import torch

from ..errors import ConfigError

log = logging.getLogger("up")


def check_speed_settings(rt):
    """The ConfigError these keys would raise at build time, without changing anything
    (``up config`` / ``--dry-run`` call it too)."""
    if rt["cudnn_benchmark"] and rt["deterministic"]:
        # cudnn.benchmark picks the fastest convolution algorithm per input shape by timing them
        raise ConfigError("runtime.cudnn_benchmark", "cannot be combined with runtime.deterministic: true",
                          "autotuning chooses algorithms by their timing, which is not reproducible")
    compile_kwargs(rt)


def set_backend_flags(rt):
    check_speed_settings(rt)
    if rt["cudnn_benchmark"]:
        torch.backends.cudnn.benchmark = True


def compile_kwargs(rt):
    """None when runtime.compile is off, else the torch.compile keyword arguments (checked)."""
    from ..registry import check_kwargs

    value = rt["compile"]
    if value is False:
        return None
    kwargs = {} if value is True else dict(value)
    check_kwargs(torch.compile, kwargs, "runtime.compile", provided={"model"})
    try:  # values (mode, backend names) are checked when torch.compile is called; tracing waits for a call
        torch.compile(_identity, **kwargs)
    except (RuntimeError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError("runtime.compile", str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return kwargs


def _identity(x):
    return x


def prepare_model(model, rt):
    """channels_last and torch.compile, applied in place to the bare module (before any DDP
    wrapper). ``nn.Module.compile`` compiles the module's call but leaves the module itself in
    place, so ``state_dict`` keys, hooks that address submodules by name, DDP and checkpoints
    see the plain model."""
    if rt["channels_last"]:
        model.to(memory_format=torch.channels_last)
    kwargs = compile_kwargs(rt)
    if kwargs is not None:
        if not hasattr(model, "compile"):
            raise ConfigError("runtime.compile", f"needs torch >= 2.2 (this is {torch.__version__})")
        try:
            model.compile(**kwargs)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise ConfigError("runtime.compile", str(exc).splitlines()[0]) from None
        log.info("torch.compile: %s (the first iterations include compilation)", kwargs or "default settings")
    return model


def batch_memory_format(rt):
    """The memory format 4-D image batches are given on the device (None: leave them)."""
    return torch.channels_last if rt["channels_last"] else None
