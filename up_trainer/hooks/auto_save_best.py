"""auto_save_best: keep ckpt_best.pth, the full state at the best evaluation so far."""
import logging
import math

from ..engine.checkpoint import BEST
from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")


@HOOKS.register("auto_save_best")
class AutoSaveBest(Hook):
    """Write ckpt_best.pth whenever the monitored metric improves (NaN/Inf never count)."""

    priority = "LOW"

    def __init__(self, metric: str = None, mode: str = "max"):
        super().__init__()
        if mode not in ("max", "min"):
            raise ConfigError("mode", f"expected max or min, got {mode!r}")
        self.metric = metric
        self.mode = mode
        self.best = None
        self.best_epoch = None

    def before_train(self, trainer):
        ev = trainer.evaluator
        if ev is None:
            return
        self.metric = self.metric or ev.primary_metric
        keys = ev.metric_keys()
        if self.metric not in keys:
            raise ConfigError("hooks.auto_save_best.kwargs.metric",
                              f"the evaluator does not produce {self.metric!r}", f"it produces: {', '.join(keys)}")

    def _better(self, value):
        if self.best is None:
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def after_eval(self, trainer, metrics):
        value = metrics.get(self.metric)
        if value is None or not math.isfinite(float(value)) or not self._better(float(value)):
            return
        self.best, self.best_epoch = float(value), trainer.state.epoch
        log.info("new best %s=%.4f at epoch %d", self.metric, self.best, self.best_epoch)
        if BEST not in trainer.pending_saves:
            trainer.pending_saves.append(BEST)

    def before_save_checkpoint(self, trainer, ckpt):
        ckpt["metric_val"] = self.best

    def state_dict(self):
        return {"best": self.best, "best_epoch": self.best_epoch, "metric": self.metric}

    def load_state_dict(self, state):
        self.best = state.get("best")
        self.best_epoch = state.get("best_epoch")
