"""auto_save_best: keep ckpt_best.pth, the full state at the best evaluation so far.

The best value travels in the hook's state (ckpt['hooks']['auto_save_best']), so a resumed
run keeps comparing against it. NaN/Inf results are never "best". With ``max_keep_ckpts``
the hook also rotates the numbered checkpoints (ckpt_e{e}.pth and interrupt snapshots
ckpt_e{e}-i{iter}.pth), oldest first.

Rotation is save-before-delete: it runs when a new checkpoint is already on disk (at the
start of the next epoch, right after the end-of-epoch save, and at the end of training),
and counts the files that exist, so a crash can leave one file too many, never one too few.
ckpt_best.pth and ckpt_latest.pth are other names (hard links) and are never touched, nor is
the numbered file ckpt_latest.pth currently names.
"""
import logging
import math
import os

from ..engine.checkpoint import BEST, LATEST, parse_name
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
        if BEST not in trainer.pending_saves:
            trainer.pending_saves.append(BEST)

    def before_save_checkpoint(self, trainer, ckpt):
        ckpt["metric_val"] = self.best

    # -- rotation -----------------------------------------------------------------------------
    def before_epoch(self, trainer, epoch):
        self.rotate(trainer)  # the previous epoch's save is complete by now

    def after_train(self, trainer):
        self.rotate(trainer)

    def rotate(self, trainer):
        if self.max_keep_ckpts < 0 or not trainer.dist.is_main:
            return []
        store = trainer.store
        store.flush()  # with async_write the newest checkpoint may still be in flight: finish it first
        numbered = []
        if os.path.isdir(store.save_dir):
            for name in os.listdir(store.save_dir):
                parsed = parse_name(name)
                if parsed:  # an epoch file sorts after the interrupt snapshots of its epoch
                    numbered.append(((parsed[0], math.inf if parsed[1] is None else parsed[1]), name))
        numbered.sort()
        latest = _inode(store.path(LATEST))
        removed = []
        for _, name in numbered[: max(len(numbered) - self.max_keep_ckpts, 0)]:
            path = store.path(name)
            if latest is not None and _inode(path) == latest:
                continue  # what a resume would load; never removed, even when it is not the newest
            for victim in (path, os.path.splitext(path)[0] + ".safetensors"):
                try:
                    os.unlink(victim)
                except FileNotFoundError:
                    continue
                removed.append(victim)
        if removed:
            log.info("max_keep_ckpts=%d: removed %s", self.max_keep_ckpts,
                     ", ".join(os.path.basename(p) for p in removed))
        return removed

    def state_dict(self):
        return {"best": self.best, "best_epoch": self.best_epoch, "metric": self.metric}

    def load_state_dict(self, state):
        self.best = state.get("best")
        self.best_epoch = state.get("best_epoch")
        self._loaded_metric = state.get("metric")


def _inode(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
