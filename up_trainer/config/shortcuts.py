"""Shortcut config sections turned into hooks, so one implementation serves both spellings.

- UP's top-level ``ema: {enable, ema_type, kwargs: {decay, warmup}}`` -> an ``ema`` hook
- ``trainer.clip_grad: {max_norm, norm_type, ...}`` (MMEngine habit) -> a ``grad_clipper`` hook
- UP's ``runtime.async_norm: true`` -> a ``sync_buffers`` hook with ``mode: mean``

Runs after --opts, so ``--opts ema.enable=false`` or ``trainer.clip_grad.max_norm=5`` work.
No torch import here: ``up config`` stays fast.
"""
from ..errors import ConfigError, did_you_mean, join_path

CLIP_GRAD_KEYS = ("mode", "max_norm", "norm_type", "tolerance", "momentum")
EMA_KEYS = ("enable", "ema_type", "kwargs")


def _check_keys(section, path, allowed):
    for key in section:
        if key not in allowed:
            raise ConfigError(join_path(path, key), "unknown key",
                              did_you_mean(key, allowed) or f"known: {', '.join(allowed)}")


def listed_hook_types(hooks):
    """Type names of the hook entries (entries without a string type are reported later)."""
    return {h.get("type") for h in hooks if isinstance(h, dict) and isinstance(h.get("type"), str)}


def shortcuts_to_hooks(cfg):
    hooks = cfg.get("hooks")
    if not isinstance(hooks, list):
        return cfg  # add_default_hooks already rejected anything else
    listed = listed_hook_types(hooks)
    ema = cfg.pop("ema", None)
    if ema is not None:
        if not isinstance(ema, dict):
            raise ConfigError("ema", "expected {enable, ema_type, kwargs: {decay, warmup}}")
        _check_keys(ema, "ema", EMA_KEYS)
        if not isinstance(ema.get("kwargs") or {}, dict):
            raise ConfigError("ema.kwargs", "expected a mapping like {decay: 0.9998}")
        if ema.get("enable", True):
            if "ema" in listed:
                raise ConfigError("ema", "EMA is configured twice (the ema section and an ema hook)", "keep one")
            kwargs = dict(ema.get("kwargs") or {})
            if "ema_type" in ema:
                kwargs["ema_type"] = ema["ema_type"]
            hooks.append({"type": "ema", "kwargs": kwargs})
    trainer = cfg.get("trainer")
    clip = trainer.pop("clip_grad", None) if isinstance(trainer, dict) else None
    if clip is not None:
        if not isinstance(clip, dict):
            raise ConfigError("trainer.clip_grad", "expected grad_clipper kwargs, e.g. {max_norm: 10}")
        _check_keys(clip, "trainer.clip_grad", CLIP_GRAD_KEYS)
        if "grad_clipper" in listed:
            raise ConfigError("trainer.clip_grad", "clipping is configured twice (clip_grad and a grad_clipper "
                              "hook)", "keep one")
        hooks.append({"type": "grad_clipper", "kwargs": dict(clip)})
    runtime = cfg.get("runtime")
    if isinstance(runtime, dict) and runtime.get("async_norm") is True and "sync_buffers" not in listed:
        hooks.append({"type": "sync_buffers", "kwargs": {"mode": "mean"}})
    return cfg
