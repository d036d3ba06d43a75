"""LR schedules, stepped once per optimizer update."""
import torch

from ..errors import ConfigError, did_you_mean


def build_lr_scheduler(optimizer, cfg, updates_per_epoch, max_epoch, path="trainer.lr_scheduler"):
    if not cfg:
        return None
    from ..registry import check_kwargs

    name = cfg.get("type")
    cls = getattr(torch.optim.lr_scheduler, str(name), None)
    if not isinstance(cls, type):
        names = sorted(n for n in dir(torch.optim.lr_scheduler) if n.endswith("LR"))
        raise ConfigError(f"{path}.type", f"unknown lr scheduler {name!r}", did_you_mean(name, names))
    kwargs = dict(cfg.get("kwargs") or {})
    check_kwargs(cls, kwargs, f"{path}.kwargs", provided={"optimizer"})
    try:
        return cls(optimizer, **kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}.kwargs", str(exc)) from None
