"""LR schedules with warmup and UP's LR scaling, stepped once per optimizer update.

``trainer.lr_scheduler``::

    type: MultiStepLR            # any torch.optim.lr_scheduler class, or polylr / cosine / constant
    kwargs: {milestones: [30, 60], gamma: 0.1}   # epoch-valued kwargs are converted to updates
    warmup_epochs: 1             # or warmup_iter: 500 (updates); the larger wins, as in UP
    warmup_type: linear          # linear | exp | cos
    warmup_ratio: 0.001          # warmup starts at ratio x target lr
    warmup_register_type: no_scale_lr   # default; "base" = UP's lr-per-image scaling

The schedule counts optimizer updates (with ``trainer.accumulate: 4`` one update per four
batches). Epoch-valued kwargs become ``int(epochs * updates_per_epoch)`` as in UP.
The main schedule runs from update 0 (warmup included), undisturbed by the warmup curve,
which only overrides the lr during the first ``warmup_iter`` updates.
"""
import logging
import math
from typing import Optional

import torch
from torch.optim.lr_scheduler import LRScheduler

from ..errors import ConfigError, did_you_mean
from ..registry import LR_SCHEDULERS, check_kwargs
from .numbers import check_numbers

log = logging.getLogger("up")

KEYS = ("type", "kwargs", "warmup_epochs", "warmup_iter", "warmup_type", "warmup_ratio", "warmup_register_type")
# torch kwargs counted in scheduler steps; we step per update, the user thinks in epochs.
EPOCH_KWARGS = {"StepLR": ("step_size",), "MultiStepLR": ("milestones",), "CosineAnnealingLR": ("T_max",),
                "CosineAnnealingWarmRestarts": ("T_0",), "ConstantLR": ("total_iters",),
                "LinearLR": ("total_iters",), "PolynomialLR": ("total_iters",), "SWALR": ("anneal_epochs",)}
UNSUPPORTED = {"ReduceLROnPlateau": "it needs a metric every step", "LambdaLR": "it needs a Python callable",
               "MultiplicativeLR": "it needs a Python callable", "SequentialLR": "it needs scheduler objects",
               "ChainedScheduler": "it needs scheduler objects"}
PROVIDED = {"optimizer", "updates_per_epoch", "trainer_max_epoch", "warmup_iter"}


def _epochs_to_updates(value, upe):
    if isinstance(value, (list, tuple)):
        return [_epochs_to_updates(v, upe) for v in value]
    return max(1, int(value * upe))


@LR_SCHEDULERS.register("constant")
class ConstantAfterWarmup(LRScheduler):
    """The optimizer's lr, unchanged (useful with warmup only)."""

    def __init__(self, optimizer, updates_per_epoch=1, trainer_max_epoch=1, warmup_iter=0):
        super().__init__(optimizer)

    def get_lr(self):
        return list(self.base_lrs)


@LR_SCHEDULERS.register("polylr")
class PolyLR(LRScheduler):
    """UP's polylr: (base - min_lr) * (1 - t / T) ** power + min_lr, T = max_iter or max_epoch epochs."""

    def __init__(self, optimizer, updates_per_epoch=1, trainer_max_epoch=1, warmup_iter=0, power: float = 1.0,
                 min_lr: float = 0.0, max_iter: int = -1, max_epoch: Optional[float] = None):
        self.power, self.min_lr = power, min_lr
        # UP's kwargs: max_iter (updates) or max_epoch (default: the trainer's)
        epochs = max_epoch if max_epoch is not None else trainer_max_epoch
        self.total = max_iter if max_iter > 0 else _epochs_to_updates(epochs, updates_per_epoch)
        super().__init__(optimizer)

    def get_lr(self):
        coeff = (1 - min(self.last_epoch, self.total) / self.total) ** self.power
        return [(base - self.min_lr) * coeff + self.min_lr for base in self.base_lrs]


@LR_SCHEDULERS.register("cosine")
class CosineWithFloor(LRScheduler):
    """Half cosine from the base lr (after warmup) down to a floor reached at T_max epochs, then flat."""

    def __init__(self, optimizer, updates_per_epoch=1, trainer_max_epoch=1, warmup_iter=0,
                 T_max: Optional[float] = None, min_lr: float = 0.0, min_lr_ratio: Optional[float] = None):
        self.total = _epochs_to_updates(T_max if T_max is not None else trainer_max_epoch, updates_per_epoch)
        self.warmup_iter = min(warmup_iter, self.total - 1)
        self.min_lr, self.min_lr_ratio = min_lr, min_lr_ratio
        super().__init__(optimizer)

    def get_lr(self):
        t = min(max(self.last_epoch - self.warmup_iter, 0) / (self.total - self.warmup_iter), 1.0)
        factor = (1 + math.cos(math.pi * t)) / 2
        out = []
        for base in self.base_lrs:
            floor = base * self.min_lr_ratio if self.min_lr_ratio is not None else self.min_lr
            out.append(floor + (base - floor) * factor)
        return out


class ScheduledLR:
    """Main schedule + warmup. The main schedule sees only its own lrs (warmup never leaks
    into chainable torch schedulers); during warmup the group lrs are overridden."""

    def __init__(self, optimizer, inner, warmup_iter, warmup_type, start_lrs, target_lrs):
        self.optimizer = optimizer
        self.inner = inner
        self.warmup_iter = warmup_iter
        self.warmup_type = warmup_type
        self.start_lrs = start_lrs
        self.target_lrs = target_lrs
        self.last_iter = 0  # optimizer updates done
        self._apply_warmup()

    def warmup_lr(self, i, t):
        start, target = self.start_lrs[i], self.target_lrs[i]
        span = max(1, self.warmup_iter - 1)  # UP: the target is reached at update warmup_iter - 1
        if self.warmup_type == "linear":
            return start + (target - start) / span * t
        if self.warmup_type == "exp":
            return start * ((target / start) ** (1.0 / span)) ** t
        return start + (target - start) * (1 - math.cos(math.pi * t / span)) / 2

    def _apply_warmup(self):
        if self.last_iter < self.warmup_iter:
            for i, group in enumerate(self.optimizer.param_groups):
                group["lr"] = self.warmup_lr(i, self.last_iter)

    def step(self):
        self.last_iter += 1
        for group, lr in zip(self.optimizer.param_groups, self.inner.get_last_lr()):
            group["lr"] = lr
        self.inner.step()
        self._apply_warmup()

    def get_last_lr(self):
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        return {"last_iter": self.last_iter, "inner": self.inner.state_dict(), "warmup_iter": self.warmup_iter,
                "start_lrs": list(self.start_lrs), "target_lrs": list(self.target_lrs)}

    def load_state_dict(self, state):
        self.inner.load_state_dict(state["inner"])
        self.last_iter = state["last_iter"]
        self.warmup_iter = state["warmup_iter"]
        self.start_lrs, self.target_lrs = list(state["start_lrs"]), list(state["target_lrs"])


def _main_scheduler(optimizer, cfg, updates_per_epoch, max_epoch, warmup_iter, path):
    name = cfg.get("type") or "constant"
    kwargs = dict(cfg.get("kwargs") or {})
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{path}.kwargs", "expected a mapping")
    for key in sorted(PROVIDED & set(kwargs)):
        raise ConfigError(f"{path}.kwargs.{key}", "set by the trainer; remove it")
    if name in LR_SCHEDULERS:
        cls = LR_SCHEDULERS.get(name)
        check_kwargs(cls, kwargs, f"{path}.kwargs", provided=PROVIDED)
        extra = dict(updates_per_epoch=updates_per_epoch, trainer_max_epoch=max_epoch, warmup_iter=warmup_iter)
        return _construct(cls, optimizer, kwargs, extra, path)
    cls = getattr(torch.optim.lr_scheduler, str(name), None)
    if name in UNSUPPORTED:
        raise ConfigError(f"{path}.type", f"{name} is not supported: {UNSUPPORTED[name]}")
    if not (isinstance(cls, type) and issubclass(cls, LRScheduler)) or cls is LRScheduler:
        names = sorted(n for n in dir(torch.optim.lr_scheduler) if n.endswith("LR") and n not in UNSUPPORTED)
        names += LR_SCHEDULERS.names()
        raise ConfigError(f"{path}.type", f"unknown lr scheduler {name!r}",
                          did_you_mean(name, names) or f"known: {', '.join(names)}")
    if name == "CosineAnnealingLR":
        kwargs.setdefault("T_max", max_epoch)
    check_kwargs(cls, kwargs, f"{path}.kwargs", provided={"optimizer"})
    if name == "OneCycleLR" and "total_steps" not in kwargs:  # total_steps, when given, counts updates
        kwargs.setdefault("epochs", max_epoch)
        kwargs["steps_per_epoch"] = updates_per_epoch
    if name == "ExponentialLR" and "gamma" in kwargs:  # gamma per epoch -> per update
        kwargs["gamma"] = float(kwargs["gamma"]) ** (1.0 / updates_per_epoch)
    for key in EPOCH_KWARGS.get(name, ()):
        if key in kwargs:
            kwargs[key] = _epochs_to_updates(kwargs[key], updates_per_epoch)
    return _construct(cls, optimizer, kwargs, {}, path)


def _construct(cls, optimizer, kwargs, extra, path):
    try:
        return cls(optimizer, **kwargs, **extra)
    except (ValueError, TypeError, ZeroDivisionError) as exc:
        raise ConfigError(f"{path}.kwargs", str(exc)) from None


def build_lr_scheduler(optimizer, cfg, updates_per_epoch, max_epoch, path="trainer.lr_scheduler",
                       world_size=1, batch_size=1):
    """A :class:`ScheduledLR` (or None without ``trainer.lr_scheduler``); may rescale group lrs.

    ``batch_size`` is the number of images per optimizer update on one process (batch size x
    accumulate); UP's "base" scaling multiplies every lr by ``world_size * batch_size``.
    """
    if not cfg:
        return None
    if not isinstance(cfg, dict):
        raise ConfigError(path, f"expected a mapping, got {type(cfg).__name__}")
    for key in cfg:
        if key not in KEYS:
            raise ConfigError(f"{path}.{key}", "unknown key", did_you_mean(key, KEYS) or f"known: {', '.join(KEYS)}")
    check_numbers({k: v for k, v in cfg.items() if k != "type"}, path)
    register = cfg.get("warmup_register_type", "no_scale_lr")
    if register not in ("base", "no_scale_lr"):
        raise ConfigError(f"{path}.warmup_register_type", f"unknown {register!r}",
                          "no_scale_lr (lr as written, the default) or base (UP: lr per image x world_size x batch)")
    warmup_type = cfg.get("warmup_type", "linear")
    if warmup_type not in ("linear", "exp", "cos"):
        raise ConfigError(f"{path}.warmup_type", f"unknown {warmup_type!r}", "use linear, exp or cos")
    for key in ("warmup_epochs", "warmup_iter", "warmup_ratio"):
        v = cfg.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise ConfigError(f"{path}.{key}", f"expected a number >= 0, got {v!r}")
    warmup_iter = max(int(cfg.get("warmup_iter") or 0), int((cfg.get("warmup_epochs") or 0) * updates_per_epoch))
    scale = world_size * batch_size if register == "base" else 1
    written = [g["lr"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["lr"] = g["lr"] * scale
    targets = [g["lr"] for g in optimizer.param_groups]
    ratio = cfg.get("warmup_ratio")
    if ratio is None:  # UP starts from the lr as written (per image); without scaling that is flat
        starts = written if scale != 1 else [t * 0.001 for t in targets]
    else:
        starts = [t * ratio for t in targets]
    if warmup_iter and warmup_type == "exp" and min(starts) <= 0:
        raise ConfigError(f"{path}.warmup_ratio", "exp warmup needs a start lr > 0", "use warmup_ratio > 0")
    inner = _main_scheduler(optimizer, cfg, updates_per_epoch, max_epoch, warmup_iter, path)
    log.info("lr schedule: %s, %d updates/epoch, lr %s%s, warmup %d updates (%s from %.4g)", cfg.get("type") or "constant",
             updates_per_epoch, f"{written[0]:.6g} x {scale} = " if scale != 1 else "", f"{targets[0]:.6g}",
             warmup_iter, warmup_type, starts[0] if warmup_iter else targets[0])
    return ScheduledLR(optimizer, inner, warmup_iter, warmup_type, starts, targets)
