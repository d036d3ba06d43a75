"""auto_save_best: keep ckpt_best.pth, the full state at the best evaluation so far.

The best value travels in the hook's state (ckpt['hooks']['auto_save_best']), so a resumed
run keeps comparing against it. NaN/Inf results are never "best". ``max_keep_ckpts`` sets
the checkpoint policy's keep-N (the trainer rotates the numbered checkpoints, oldest first:
:mod:`up_trainer.engine.checkpoint_policy`).
"""
import logging
import math

from ..engine.checkpoint import BEST
from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")


def check_metric_key(evaluator, metric, path):
    """The metric to monitor (default: the evaluator's primary); error if it is never produced."""
    metric = metric or evaluator.primary_metric
    keys = list(evaluator.metric_keys())
    if metric not in keys:
        raise ConfigError(path, f"the evaluator does not produce {metric!r}", f"it produces: {', '.join(keys)}")
    return metric


def improves(value, best, mode, min_delta=0.0):
    """Whether a finite ``value`` beats ``best`` by more than ``min_delta`` (None: anything does)."""
    if value is None or not math.isfinite(value):
        return False
    if best is None:
        return True
    return value > best + min_delta if mode == "max" else value < best - min_delta


@HOOKS.register("auto_save_best")
class AutoSaveBest(Hook):
    """Write ckpt_best.pth whenever the monitored metric improves (NaN/Inf never count).

    metric: the metric key (default: the evaluator's primary metric, top1 / bbox AP).
    mode: max or min. max_keep_ckpts: keep only the newest N numbered checkpoints
    (ckpt_e*.pth); -1 keeps all. Best and latest are never deleted.
    """

    priority = "LOW"

    def __init__(self, metric: str = None, mode: str = "max", max_keep_ckpts: int = -1):
        super().__init__()
        if mode not in ("max", "min"):
            raise ConfigError("mode", f"expected max or min, got {mode!r}")
        if max_keep_ckpts == 0 or max_keep_ckpts < -1:
            raise ConfigError("max_keep_ckpts", f"expected -1 (keep all) or >= 1, got {max_keep_ckpts}")
        self.metric = metric
        self.mode = mode
        self.max_keep_ckpts = max_keep_ckpts
        self.best = None
        self.best_epoch = None
        self._loaded_metric = None

    def before_train(self, trainer):
        if self.max_keep_ckpts > 0:
            trainer.checkpoints.set_keep(self.max_keep_ckpts)
        ev = trainer.evaluator
        if ev is None:
            return
        self.metric = check_metric_key(ev, self.metric, f"hooks.{self.name}.kwargs.metric")
        if self._loaded_metric not in (None, self.metric) and self.best is not None:
            log.warning("auto_save_best: the checkpoint's best is for %r, now monitoring %r: starting over",
                        self._loaded_metric, self.metric)
            self.best = self.best_epoch = None

    def after_eval(self, trainer, metrics):
        value = metrics.get(self.metric)
        value = None if value is None else float(value)
        if value is not None and not math.isfinite(value):
            log.warning("auto_save_best: %s=%s at epoch %d is not finite; never a best", self.metric, value,
                        trainer.state.epoch)
        if not improves(value, self.best, self.mode):
            return
        self.best, self.best_epoch = value, trainer.state.epoch
        log.info("new best %s=%.4f at epoch %d", self.metric, self.best, self.best_epoch)
        trainer.checkpoints.request(BEST)

    def before_save_checkpoint(self, trainer, ckpt):
        ckpt["metric_val"] = self.best

    @property
    def monitored(self):
        """The metric the best is of: the resolved key, else the one a loaded checkpoint names
        (a finished run resumed: nothing is evaluated, so the key is never resolved)."""
        return self.metric or self._loaded_metric

    def state_dict(self):
        return {"best": self.best, "best_epoch": self.best_epoch, "metric": self.metric}

    def load_state_dict(self, state):
        self.best = state.get("best")
        self.best_epoch = state.get("best_epoch")
        self._loaded_metric = state.get("metric")

