"""Warmup curves (UP's formulas), one lr per param group for each of the first ``iters`` updates.

``t`` is the update index (0-based), ``w`` the number of warmup updates, ``start`` / ``target``
the group's first and final lr:

- ``linear``: ``start + (target - start) * t / (w - 1)``
- ``exp``: ``start * (target / start) ** (t / (w - 1))``
- ``cos`` (UP: ``cosine``): ``start + (target - start) * (1 - cos(pi * t / (w - 1))) / 2``
- ``yolox_cos``: ``target * (t / w) ** 2`` (YOLOX; starts at 0 and stops one step short of the target)
- ``yolov5linear``: per group, linear from ``warmup_group_init_lr[g]`` at update 0 towards
  ``target * f(t // epoch_updates)`` at update ``w``, where ``f(e) = (1 + cos(pi e / E)) / 2 * (1 - m) + m``
  with ``E = warmup_total_epochs`` and ``m = min_lr_scale``; with ``warmup_weight_decay: true``
  the momentum also goes linearly over ``warmup_weight_decay_range`` (UP's name).

The first three reach the target at update ``w - 1``. The last two do not: UP's main schedule
then starts from the lr warmup reached (``ends()``), not from the target.
"""
import math

KINDS = ("linear", "exp", "cos", "cosine", "yolox_cos", "yolov5linear")
# Warmups that end away from the target: the main schedule continues from where they stopped.
ENDS_OFF_TARGET = ("yolox_cos", "yolov5linear")
YOLOV5_DEFAULTS = {"warmup_total_epochs": 300, "warmup_group_init_lr": [0.0, 0.0, 0.1],
                   "warmup_weight_decay": False, "warmup_weight_decay_range": [0.8, 0.937], "min_lr_scale": 0.2}


def yolov5_cosine_factor(epoch, total_epochs, min_scale):
    """YOLOv5's one-cycle cosine: 1 at epoch 0, ``min_scale`` at ``total_epochs``."""
    return (1 + math.cos(epoch * math.pi / total_epochs)) / 2 * (1 - min_scale) + min_scale


def interp(t, span, a, b):
    """numpy.interp on [0, span] for t in range, without numpy."""
    if t >= span:
        return b
    return a + (b - a) * t / span


class Warmup:
    def __init__(self, kind, iters, starts, targets, epoch_updates=1, yolov5=None):
        self.kind = "cos" if kind == "cosine" else kind
        self.iters = iters
        self.starts = list(starts)
        self.targets = list(targets)
        self.epoch_updates = max(1, epoch_updates)
        self.yolov5 = dict(YOLOV5_DEFAULTS, **(yolov5 or {}))
        if self.kind == "yolov5linear":
            inits = [float(v) for v in self.yolov5["warmup_group_init_lr"]]
            # UP pads the list at the front with zeros when there are more groups than values
            n = len(self.targets)
            self.starts = ([0.0] * (n - len(inits)) + inits)[-n:] if len(inits) < n else inits[:n]

    def lr(self, i, t):
        start, target = self.starts[i], self.targets[i]
        span = max(1, self.iters - 1)  # UP: the target is reached at update iters - 1
        if self.kind == "linear":
            return start + (target - start) / span * t
        if self.kind == "exp":
            return start * ((target / start) ** (1.0 / span)) ** t
        if self.kind == "cos":
            return start + (target - start) * (1 - math.cos(math.pi * t / span)) / 2
        if self.kind == "yolox_cos":
            return target * (t / float(self.iters)) ** 2
        c = self.yolov5
        factor = yolov5_cosine_factor(t // self.epoch_updates, c["warmup_total_epochs"], c["min_lr_scale"])
        return interp(t, self.iters, start, target * factor)

    def momentum(self, t):
        """The momentum warmup of yolov5linear (None when it does not apply)."""
        if self.kind != "yolov5linear" or not self.yolov5["warmup_weight_decay"]:
            return None
        low, high = self.yolov5["warmup_weight_decay_range"]
        return interp(t, self.iters, low, high)

    def ends(self):
        """The lr of each group at the last warmup update."""
        return [self.lr(i, self.iters - 1) for i in range(len(self.targets))]

    def apply(self, optimizer, t):
        for i, group in enumerate(optimizer.param_groups):
            group["lr"] = self.lr(i, t)
        m = self.momentum(t)
        if m is not None:
            for group in optimizer.param_groups:
                if "momentum" in group:
                    group["momentum"] = m
