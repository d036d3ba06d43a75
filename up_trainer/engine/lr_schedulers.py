"""LR schedules with warmup and UP's LR scaling, stepped once per optimizer update.

``trainer.lr_scheduler``::

    type: MultiStepLR            # any torch.optim.lr_scheduler class, polylr / cosine / constant,
                                 # or UP's (up_lr_schedulers.py)
    kwargs: {milestones: [30, 60], gamma: 0.1}   # epoch-valued kwargs are converted to updates
    warmup_epochs: 1             # or warmup_iter: 500 (updates); the larger wins, as in UP
    warmup_type: linear          # linear | exp | cos, UP's yolox_cos / yolov5linear (warmup.py)
    warmup_ratio: 0.001          # warmup starts at ratio x target lr; -1: at the lr as written (UP)
    warmup_register_type: no_scale_lr   # default; "base" = UP's lr-per-image scaling, "yolov5" too

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
from .warmup import ENDS_OFF_TARGET, KINDS as WARMUP_KINDS, YOLOV5_DEFAULTS, Warmup

log = logging.getLogger("up")

KEYS = ("type", "kwargs", "warmup_epochs", "warmup_iter", "warmup_type", "warmup_ratio", "warmup_register_type",
        "lr_register_type") + tuple(YOLOV5_DEFAULTS)
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

    def __init__(self, optimizer, inner, warmup):
        self.optimizer = optimizer
        self.inner = inner
        self.warmup = warmup
        self.warmup_iter = warmup.iters
        self.last_iter = 0  # optimizer updates done
        self._apply_warmup()

    def warmup_lr(self, i, t):
        return self.warmup.lr(i, t)

    def _apply_warmup(self):
        if self.last_iter < self.warmup_iter:
            self.warmup.apply(self.optimizer, self.last_iter)

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
                "start_lrs": list(self.warmup.starts), "target_lrs": list(self.warmup.targets)}

    def load_state_dict(self, state):
        self.inner.load_state_dict(state["inner"])
        self.last_iter = state["last_iter"]
        self.warmup_iter = self.warmup.iters = state["warmup_iter"]
        self.warmup.starts, self.warmup.targets = list(state["start_lrs"]), list(state["target_lrs"])


def _main_scheduler(optimizer, cfg, updates_per_epoch, max_epoch, warmup_iter, path):
    name = cfg.get("type") or "constant"
    kwargs = dict(cfg.get("kwargs") or {})
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{path}.kwargs", "expected a mapping")
    if name == "CosineAnnealingLR" and "warmup_iter" in kwargs:
        # UP's CosineAnnealingLR: a kwargs.warmup_iter shifts the cosine to start after warmup
        from .up_lr_schedulers import ShiftedCosineAnnealingLR

        shift = kwargs.pop("warmup_iter")
        if isinstance(shift, bool) or not isinstance(shift, int) or shift < 0:
            raise ConfigError(f"{path}.kwargs.warmup_iter", f"expected an int >= 0 (updates), got {shift!r}")
        check_kwargs(ShiftedCosineAnnealingLR, kwargs, f"{path}.kwargs", provided=PROVIDED | {"up_warmup_iter"})
        extra = dict(updates_per_epoch=updates_per_epoch, trainer_max_epoch=max_epoch, up_warmup_iter=shift)
        return _construct(ShiftedCosineAnnealingLR, optimizer, kwargs, extra, path)
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
        if "epochs" in kwargs:
            kwargs["steps_per_epoch"] = updates_per_epoch
        else:  # the run's length, fractional epochs included
            kwargs["total_steps"] = _epochs_to_updates(max_epoch, updates_per_epoch)
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


def _check_choice(cfg, key, default, choices, path, hint):
    value = cfg.get(key, default)
    if value not in choices:
        raise ConfigError(f"{path}.{key}", f"unknown {value!r}", hint)
    return value


def _yolov5_warmup_cfg(cfg, path):
    out = {}
    for key, default in YOLOV5_DEFAULTS.items():
        v = cfg.get(key, default)
        if key == "warmup_weight_decay":
            ok = isinstance(v, bool)
        elif isinstance(default, list):
            ok = isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
            ok = ok and (key != "warmup_weight_decay_range" or len(v) == 2)
        else:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
        if not ok:
            raise ConfigError(f"{path}.{key}", f"invalid value {v!r}", f"default: {default!r}")
        out[key] = v
    return out


def build_lr_scheduler(optimizer, cfg, updates_per_epoch, max_epoch, path="trainer.lr_scheduler",
                       world_size=1, batch_size=1):
    """A :class:`ScheduledLR` (or None without ``trainer.lr_scheduler``); may rescale group lrs.

    ``batch_size`` is the number of images per optimizer update on one process (batch size x
    accumulate); UP's "base" scaling multiplies every lr by ``world_size * batch_size``.
    ``max_epoch`` may be fractional (the run's length in epochs).
    """
    if not cfg:
        return None
    if not isinstance(cfg, dict):
        raise ConfigError(path, f"expected a mapping, got {type(cfg).__name__}")
    for key in cfg:
        if key not in KEYS:
            raise ConfigError(f"{path}.{key}", "unknown key", did_you_mean(key, KEYS) or f"known: {', '.join(KEYS)}")
    check_numbers({k: v for k, v in cfg.items() if k != "type"}, path)
    register = _check_choice(cfg, "warmup_register_type", "no_scale_lr", ("base", "no_scale_lr", "yolov5"), path,
                             "no_scale_lr (lr as written, the default), base (UP: lr per image x world_size x "
                             "batch) or yolov5 (base with YOLOv5's warmup keys)")
    _check_choice(cfg, "lr_register_type", "base", ("base", "yolox_base"), path, "use base or yolox_base")
    warmup_type = _check_choice(cfg, "warmup_type", "linear", WARMUP_KINDS, path,
                                "use linear, exp or cos (UP also: cosine, yolox_cos, yolov5linear)")
    for key in ("warmup_epochs", "warmup_iter"):
        v = cfg.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise ConfigError(f"{path}.{key}", f"expected a number >= 0, got {v!r}")
    ratio = cfg.get("warmup_ratio")
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float))
                              or (ratio < 0 and ratio != -1)):
        raise ConfigError(f"{path}.warmup_ratio", f"expected a number >= 0 (or -1: start at the lr as written), "
                          f"got {ratio!r}")
    warmup_iter = max(int(cfg.get("warmup_iter") or 0), int((cfg.get("warmup_epochs") or 0) * updates_per_epoch))
    scale = world_size * batch_size if register in ("base", "yolov5") else 1
    written = [g["lr"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["lr"] = g["lr"] * scale
    targets = [g["lr"] for g in optimizer.param_groups]
    if ratio == -1 or (ratio is None and scale != 1):  # UP: start from the lr as written (per image)
        starts = written
    else:  # without scaling, starting from the lr as written would be flat
        starts = [t * (0.001 if ratio is None else ratio) for t in targets]
    if warmup_iter and warmup_type == "exp" and min(starts) <= 0:
        raise ConfigError(f"{path}.warmup_ratio", "exp warmup needs a start lr > 0", "use warmup_ratio > 0")
    yolov5 = _yolov5_warmup_cfg(cfg, path) if warmup_type == "yolov5linear" else None
    warmup = Warmup(warmup_type, warmup_iter, starts, targets, updates_per_epoch, yolov5)
    inner = _main_scheduler(optimizer, cfg, updates_per_epoch, max_epoch, warmup_iter, path)
    if warmup_iter and warmup_type in ENDS_OFF_TARGET and type(inner).__module__ != LRScheduler.__module__:
        # UP hands over at the lr warmup reached, which these warmups leave short of the target.
        # Our own schedules are closed forms of base_lrs, so they simply start from there.
        inner.base_lrs = warmup.ends()
        inner._last_lr = inner.get_lr()
    log.info("lr schedule: %s, %d updates/epoch, lr %s%s, warmup %d updates (%s from %.4g)", cfg.get("type") or "constant",
             updates_per_epoch, f"{written[0]:.6g} x {scale} = " if scale != 1 else "", f"{targets[0]:.6g}",
             warmup_iter, warmup_type, warmup.lr(0, 0) if warmup_iter else targets[0])
    return ScheduledLR(optimizer, inner, warmup)
