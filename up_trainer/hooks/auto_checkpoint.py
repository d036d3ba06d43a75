"""auto_checkpoint: snapshot on signals and uncaught exceptions, at an iteration boundary.

Signal handlers only set a flag (no IO inside a handler). At the next iteration boundary
that closes an optimizer update the hook writes ``ckpt_e{e}-i{iter}.pth`` with the full
state and points ckpt_latest.pth at it; SIGTERM/SIGINT then end the run (exit 143/130),
SIGUSR1 lets it continue.
"""
import logging
import signal

from ..engine.checkpoint import interrupt_name
from ..errors import ConfigError, TrainingInterrupted, did_you_mean
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")
_EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


@HOOKS.register("auto_checkpoint")
class AutoCheckpoint(Hook):
    """Checkpoint when the job is told to stop (SIGINT/SIGTERM) or asked to (SIGUSR1)."""

    priority = "VERY_LOW"

    def __init__(self, signals: list = ("SIGINT", "SIGTERM", "SIGUSR1"), on_exception: bool = True):
        super().__init__()
        known = [s for s in dir(signal) if s.startswith("SIG") and not s.startswith("SIG_")]
        for i, name in enumerate(signals):
            if name not in known:
                raise ConfigError(f"signals[{i}]", f"unknown signal {name!r}", did_you_mean(name, known))
        self.signals = list(signals)
        self.snapshot_on_exception = on_exception
        self.pending = None  # name of the signal received, acted on at the next boundary
        self._previous = {}

    def _handler(self, signum, frame):
        self.pending = signal.Signals(signum).name

    def before_train(self, trainer):
        for name in self.signals:
            sig = getattr(signal, name)
            self._previous[sig] = signal.signal(sig, self._handler)

    def after_train(self, trainer):
        self._restore_handlers()
        if self.pending in _EXIT_CODES:  # a stop request that arrived after the last iteration
            raise TrainingInterrupted(_EXIT_CODES[self.pending], f"{self.pending} received; training had finished")

    def _restore_handlers(self):
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous = {}

    def after_update(self, trainer, iteration):
        if self.pending is None or not trainer.did_update:
            return
        received, self.pending = self.pending, None
        self.snapshot(trainer, f"{received} received")
        if received in _EXIT_CODES:
            self._restore_handlers()
            raise TrainingInterrupted(_EXIT_CODES[received], f"{received} received; snapshot written, exiting")

    def snapshot(self, trainer, why):
        st = trainer.state
        name = interrupt_name(st.epoch, st.iter)
        log.info("%s: writing %s", why, name)
        trainer.save_checkpoint([name])

    def on_exception(self, trainer, exc):
        self._restore_handlers()
        if not self.snapshot_on_exception or isinstance(exc, KeyboardInterrupt) or not trainer.did_update:
            return
        try:
            self.snapshot(trainer, f"exception {type(exc).__name__}")
        except Exception as save_exc:  # the original exception matters more
            log.error("could not write the exception snapshot: %s", save_exc)
