"""train_val_logger: one line every `freq` iterations, metrics after evaluation."""
import logging
import time

from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")


@HOOKS.register("train_val_logger")
class TrainValLogger(Hook):
    """Print progress, LR, losses, timing and ETA; print metrics after each evaluation."""

    priority = "BELOW_NORMAL"

    def __init__(self, freq: int = 20, skip_first_k: int = 5, logdir: str = "log",
                 summary_writer: str = "tensorboard"):
        super().__init__()
        self.freq = freq
        self.skip_first_k = skip_first_k
        self.logdir = logdir
        self.summary_writer = summary_writer
        self._t0 = None

    def before_epoch(self, trainer, epoch):
        self._t0 = time.perf_counter()
        self._n = 0

    def after_update(self, trainer, iteration):
        self._n += 1
        freq = getattr(trainer, "display", None) or self.freq
        st = trainer.state
        if iteration % freq and st.epoch_iter != st.epoch_len:
            return
        elapsed = time.perf_counter() - self._t0
        per_iter = elapsed / max(self._n, 1)
        total = trainer.max_epoch * st.epoch_len
        eta = per_iter * (total - iteration)
        losses = {k: float(v) for k, v in trainer.outputs.items() if "loss" in k}
        loss_txt = " ".join(f"{k}={v:.4f}" for k, v in losses.items())
        log.info("epoch %d [%d/%d] %.1f%% lr=%.5g %s time=%.3fs eta=%s", st.epoch, st.epoch_iter, st.epoch_len,
                 100.0 * iteration / max(total, 1), trainer.optim.lr(), loss_txt, per_iter, _hms(eta))

    def after_eval(self, trainer, metrics):
        txt = " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
        log.info("eval epoch %d: %s", trainer.state.epoch, txt)


def _hms(seconds):
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
