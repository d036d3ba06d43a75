"""early_stopping: end training when the monitored metric stops improving.

Patience counts evaluations (not epochs: with test_freq 2 a patience of 3 is 6 epochs).
When it runs out, the hook asks for this epoch's checkpoint (ckpt_e{e}.pth, unless the
schedule writes it anyway) and sets ``trainer.stop_training``: the run ends cleanly after the
end-of-epoch work, through after_train, exit 0. The counters are checkpointed, so a resumed
(or auto-resumed, requeued) run that had already stopped stops again at once instead of
training on; raising ``patience`` in the config lets it continue.
"""
import logging

from ..engine.checkpoint import epoch_name
from ..errors import ConfigError
from ..registry import HOOKS
from .auto_save_best import check_metric_key, improves
from .base import Hook

log = logging.getLogger("up")


@HOOKS.register("early_stopping")
class EarlyStopping(Hook):
    """Stop training after `patience` evaluations without an improvement of the monitored metric.

    monitor: metric key (default: the evaluator's primary metric). mode: max or min.
    patience: evaluations without improvement before stopping. min_delta: the smallest change
    that counts as an improvement. NaN/Inf never improve.
    """

    priority = "LOW"
    allow_multiple = True  # each instance watches its own metric; stopping when any runs out

    def __init__(self, monitor: str = None, mode: str = "max", patience: int = 5, min_delta: float = 0.0):
        super().__init__()
        if mode not in ("max", "min"):
            raise ConfigError("mode", f"expected max or min, got {mode!r}")
        if patience < 1:
            raise ConfigError("patience", f"must be >= 1, got {patience}")
        if min_delta < 0:
            raise ConfigError("min_delta", f"must be >= 0, got {min_delta}")
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = float(min_delta)
        self.best = None
        self.best_epoch = None
        self.wait = 0  # evaluations since the last improvement

    def before_train(self, trainer):
        if trainer.evaluator is None:
            raise ConfigError(f"hooks.{self.name}", "early_stopping needs evaluations", "configure dataset.test")
        self.monitor = check_metric_key(trainer.evaluator, self.monitor, f"hooks.{self.name}.kwargs.monitor")
        if self.wait >= self.patience:
            log.info("early_stopping: the resumed run had already stopped (no %s improvement for %d evaluations)",
                     self.monitor, self.wait)
            trainer.stop_training = True

    def after_eval(self, trainer, metrics):
        value = metrics.get(self.monitor)
        value = None if value is None else float(value)
        epoch = trainer.state.epoch
        if improves(value, self.best, self.mode, self.min_delta):
            self.best, self.best_epoch, self.wait = value, epoch, 0
            return
        self.wait += 1
        if self.wait < self.patience:
            return
        log.info("early stopping at epoch %d: no %s improvement beyond %g for %d evaluations (best %s at epoch %s)",
                 epoch, self.monitor, self.min_delta, self.wait, self.best, self.best_epoch)
        trainer.stop_training = True
        name = epoch_name(epoch)  # the final state on disk, whatever save_freq says
        trainer.checkpoints.request(name)

    def state_dict(self):
        return {"best": self.best, "best_epoch": self.best_epoch, "wait": self.wait, "monitor": self.monitor}

    def load_state_dict(self, state):
        self.best = state.get("best")
        self.best_epoch = state.get("best_epoch")
        self.wait = int(state.get("wait", 0))
