"""UP's own LR schedules, as closed forms of the update index ``t``.

``n`` is the number of updates per epoch (UP's ``data_size``; 1 under ``runtime.iter_base``),
``base`` the group's lr when the main schedule takes over. Epoch-valued kwargs are multiplied
by ``n`` where UP does so, and left alone where UP compares them with ``t // n``.

- ``CosineAnnealingLR`` with ``kwargs.warmup_iter`` (UP's shifted form):
  ``eta_min + (base - eta_min) * (1 + cos(pi * (t - w) / (T_max * n - w))) / 2``
- ``CosineLREpochScheduler``: per epoch, ``eta_min + (base - eta_min) * (1 + cos(pi * (t // n - warm_epoch) / T_max)) / 2``
- ``EpochBasedCosineAnnealingLR``: ``base * f(t // n + offset_epoch)`` with YOLOv5's
  ``f(e) = (1 + cos(pi e / T_max)) / 2 * (1 - eta_min) + eta_min`` (``eta_min`` is a *scale* here, as in UP)
- ``YoloV5CosineLR``: ``base * f(t // n)`` with ``f`` as above and ``min_lr_scale`` as the floor scale
- ``YoloXCosineLR``: ``m + (base - m) * (1 + cos(pi * (t - W) / (T - W - A))) / 2`` with
  ``m = base * min_lr_scale``, ``T = T_max * n``, ``W`` the warmup updates, ``A = no_aug_epoch * n``,
  and flat at ``m`` for the last ``A`` updates.
"""
import logging
import math
from typing import Optional

from torch.optim.lr_scheduler import LRScheduler

from ..registry import LR_SCHEDULERS
from .warmup import yolov5_cosine_factor

log = logging.getLogger("up")


def _span(length, what):
    """The cosine's length in updates. UP divides by it as it is; a run too short for its warmup
    gets UP's curve (running backwards) and a warning, and a zero length a flat lr instead of a
    division by zero. (``up config`` builds with one update per epoch, so no error here.)"""
    if length <= 0:
        log.warning("lr schedule: %s leaves %s updates for the cosine; the lr follows UP's formula regardless",
                    what, length)
    return length if length != 0 else math.inf


class _UpSchedule(LRScheduler):
    def __init__(self, optimizer, updates_per_epoch):
        self.updates_per_epoch = max(1, updates_per_epoch)
        super().__init__(optimizer)

    def get_lr(self):
        return [self.value(base, self.last_epoch) for base in self.base_lrs]


class ShiftedCosineAnnealingLR(_UpSchedule):
    """UP's CosineAnnealingLR when its kwargs carry ``warmup_iter`` (chosen by the builder)."""

    def __init__(self, optimizer, updates_per_epoch=1, trainer_max_epoch=1, up_warmup_iter: int = 0,
                 T_max: Optional[float] = None, eta_min: float = 0.0):
        self.span = (T_max if T_max is not None else trainer_max_epoch) * max(1, updates_per_epoch)
        self.shift, self.eta_min = up_warmup_iter, eta_min
        self.length = _span(self.span - self.shift, f"T_max ({self.span} updates) minus warmup_iter ({self.shift})")
        super().__init__(optimizer, updates_per_epoch)

    def value(self, base, t):
        phase = math.pi * (t - self.shift) / self.length
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(phase)) / 2


@LR_SCHEDULERS.register("CosineLREpochScheduler")
class CosineLREpochScheduler(_UpSchedule):
    """UP: cosine over epochs, the lr changes once per epoch."""

    def __init__(self, optimizer, updates_per_epoch=1, trainer_max_epoch=1, warmup_iter=0,
                 T_max: Optional[float] = None, eta_min: float = 0.0, warm_epoch: float = 0):
        self.T_max = T_max if T_max is not None else trainer_max_epoch
        self.eta_min, self.warm_epoch = eta_min, warm_epoch
        super().__init__(optimizer, updates_per_epoch)

    def value(self, base, t):
        epoch = t // self.updates_per_epoch
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * (epoch - self.warm_epoch) / self.T_max)) / 2


@LR_SCHEDULERS.register("SimSiamScheduler")
class SimSiamScheduler(_UpSchedule):
    """UP: SimSiam's schedule. Per epoch, ``base * (1 + cos(pi * (t // n - warm_epoch) / (T_max -
    warm_epoch))) / 2`` for the default group; the groups of ``optimizer.special_param_group``
    (SimSiam's predictor) keep their base lr (SimSiam's fixed predictor lr)."""

    def __init__(self, optimizer, updates_per_epoch=1, trainer_max_epoch=1, warmup_iter=0,
                 T_max: Optional[float] = None, warm_epoch: float = 0):
        self.warm_epoch = warm_epoch
        self.T_max = (T_max if T_max is not None else trainer_max_epoch) - warm_epoch
        super().__init__(optimizer, updates_per_epoch)

    def get_lr(self):
        from .up_param_groups import SPECIAL_GROUP

        return [base if group.get(SPECIAL_GROUP) else self.value(base, self.last_epoch)
                for base, group in zip(self.base_lrs, self.optimizer.param_groups)]

    def value(self, base, t):
        epoch = t // self.updates_per_epoch - self.warm_epoch
        return base * 0.5 * (1 + math.cos(math.pi * epoch / _span(self.T_max, "T_max minus warm_epoch")))


@LR_SCHEDULERS.register("EpochBasedCosineAnnealingLR")
class EpochBasedCosineAnnealingLR(_UpSchedule):
    """UP: YOLOv5's cosine per epoch; ``eta_min`` is the final lr as a fraction of the base lr."""

    def __init__(self, optimizer, updates_per_epoch=1, trainer_max_epoch=1, warmup_iter=0,
                 T_max: Optional[float] = None, eta_min: float = 0.0, offset_epoch: int = 0):
        self.T_max = T_max if T_max is not None else trainer_max_epoch
        self.eta_min, self.offset_epoch = eta_min, offset_epoch
        super().__init__(optimizer, updates_per_epoch)

    def value(self, base, t):
        return base * yolov5_cosine_factor(t // self.updates_per_epoch + self.offset_epoch, self.T_max, self.eta_min)


@LR_SCHEDULERS.register("YoloV5CosineLR")
class YoloV5CosineLR(_UpSchedule):
    """UP: YOLOv5's cosine per epoch down to ``min_lr_scale`` x the base lr at ``T_max`` epochs."""

    def __init__(self, optimizer, updates_per_epoch=1, trainer_max_epoch=1, warmup_iter=0,
                 T_max: Optional[float] = None, min_lr_scale: float = 0.2):
        self.T_max = T_max if T_max is not None else trainer_max_epoch
        self.min_lr_scale = min_lr_scale
        super().__init__(optimizer, updates_per_epoch)

    def value(self, base, t):
        return base * yolov5_cosine_factor(t // self.updates_per_epoch, self.T_max, self.min_lr_scale)


@LR_SCHEDULERS.register("YoloXCosineLR")
class YoloXCosineLR(_UpSchedule):
    """UP (lr_register_type yolox_base): cosine from the end of warmup to ``min_lr_scale`` x base,
    held flat for the last ``no_aug_epoch`` epochs."""

    def __init__(self, optimizer, updates_per_epoch=1, trainer_max_epoch=1, warmup_iter=0,
                 T_max: Optional[float] = None, min_lr_scale: float = 0.05, no_aug_epoch: float = 0):
        n = max(1, updates_per_epoch)
        self.total = (T_max if T_max is not None else trainer_max_epoch) * n
        self.warmup, self.no_aug = warmup_iter, no_aug_epoch * n
        self.min_lr_scale = min_lr_scale
        self.length = _span(self.total - self.warmup - self.no_aug, f"T_max ({self.total} updates) minus warmup "
                            f"({self.warmup}) and no_aug_epoch ({self.no_aug})")
        super().__init__(optimizer, updates_per_epoch)

    def value(self, base, t):
        low = base * self.min_lr_scale
        if t >= self.total - self.no_aug:
            return low
        phase = math.pi * (t - self.warmup) / self.length
        return low + 0.5 * (base - low) * (1.0 + math.cos(phase))
