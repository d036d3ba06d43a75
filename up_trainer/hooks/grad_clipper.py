"""grad_clipper: clip the gradient norm before each optimizer update (UP's three modes).

- pre_defined:     threshold = max_norm
- average:         threshold = tolerance x mean of the norms of all earlier updates
- moving_average:  threshold = tolerance x EMA (momentum) of the norms of earlier updates

The current norm never enters its own threshold (UP's code let it, which weakens the clip).
Until there is history, ``max_norm`` is used when given, else nothing is clipped. Non-finite
norms (fp16 overflow; the GradScaler skips that step) are neither clipped nor recorded.
Publishes ``grad_norm`` (pre-clip) and ``grad_clipped`` in ``trainer.scalars`` for loggers.
"""
import math
from typing import Optional

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook

MODES = ("pre_defined", "average", "moving_average")


@HOOKS.register("grad_clipper")
class GradClipper(Hook):
    """Clip the gradient norm at optimizer updates: pre_defined, average or moving_average."""

    priority = "ABOVE_NORMAL"  # before other before_step hooks that might read gradients

    def __init__(self, mode: str = "pre_defined", max_norm: Optional[float] = None, norm_type: float = 2.0,
                 tolerance: float = 1.0, momentum: float = 0.9):
        super().__init__()
        if mode not in MODES:
            from ..errors import did_you_mean

            raise ConfigError("mode", f"unknown mode {mode!r}", did_you_mean(mode, MODES) or f"use {', '.join(MODES)}")
        if mode == "pre_defined" and max_norm is None:
            raise ConfigError("max_norm", "mode pre_defined needs max_norm", "e.g. max_norm: 10")
        if max_norm is not None and not max_norm > 0:
            raise ConfigError("max_norm", f"must be > 0, got {max_norm}")
        if not norm_type > 0:
            raise ConfigError("norm_type", f"must be > 0 (or .inf), got {norm_type}")
        if not tolerance > 0:
            raise ConfigError("tolerance", f"must be > 0, got {tolerance}")
        if not 0.0 <= momentum < 1.0:
            raise ConfigError("momentum", f"must be in [0, 1), got {momentum}")
        self.mode = mode
        self.max_norm = None if max_norm is None else float(max_norm)
        self.norm_type = float(norm_type)
        self.tolerance = float(tolerance)
        self.momentum = float(momentum)
        # Running statistic over finite pre-clip norms of earlier updates (Python floats:
        # float64, identical after a resume).
        self.count = 0
        self.total = 0.0
        self.moving = None

    def threshold(self):
        """The clip threshold for the coming update, from history only (None: don't clip)."""
        if self.mode == "pre_defined":
            return self.max_norm
        if self.count == 0:
            return self.max_norm
        if self.mode == "average":
            return self.tolerance * self.total / self.count
        return self.tolerance * self.moving

    def record(self, norm):
        if self.mode == "moving_average":
            self.moving = norm if self.moving is None else self.momentum * self.moving + (1 - self.momentum) * norm
        self.count += 1
        self.total += norm

    def clip(self, parameters):
        """Clip ``parameters`` in place; returns (pre-clip total norm, clipped?)."""
        params = [p for p in parameters if p.grad is not None]
        grads = [p.grad for p in params]
        if not grads:
            return 0.0, False
        limit = self.threshold()
        utils = torch.nn.utils
        if hasattr(utils, "get_total_norm"):  # torch >= 2.6: measure once, clip with that norm
            norm_t = utils.get_total_norm(grads, self.norm_type)
        else:  # max_norm=inf scales by exactly 1.0: a pure measurement
            norm_t = utils.clip_grad_norm_(params, math.inf, self.norm_type)
        norm = float(norm_t)
        if not math.isfinite(norm):
            return norm, False
        clipped = limit is not None and norm > limit
        if clipped:  # torch's own formula: grads *= max_norm / (norm + 1e-6)
            if hasattr(utils, "clip_grads_with_norm_"):
                utils.clip_grads_with_norm_(params, limit, norm_t)
            else:
                utils.clip_grad_norm_(params, limit, self.norm_type)
        self.record(norm)
        return norm, clipped

    def before_step(self, trainer, iteration):
        # once per update: under accumulation the summed gradient is clipped, not each micro-batch's
        trainer.optim.unscale_()  # fp16: true-scale gradients before measuring them
        params = [p for g in trainer.optim.optimizer.param_groups for p in g["params"]]
        norm, clipped = self.clip(params)
        trainer.scalars.put("grad_norm", norm)
        trainer.scalars.put("grad_clipped", clipped)

    def state_dict(self):
        return {"count": self.count, "total": self.total, "moving": self.moving}

    def load_state_dict(self, state):
        self.count = state.get("count", 0)
        self.total = state.get("total", 0.0)
        self.moving = state.get("moving")
