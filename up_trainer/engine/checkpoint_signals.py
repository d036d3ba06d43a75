"""Stop signals wait for checkpoint writes.

A SIGTERM or SIGINT that lands while a checkpoint is being written must not cut the write
short: the scheduler's second SIGTERM during the interrupt snapshot once killed the run with no
snapshot, an empty stderr and a partial temp file. While the main thread writes a checkpoint,
or waits for the background writer, :func:`stop_signals_held` records those signals instead of
acting on them; when the write has completed it hands each recorded signal, once, to the
handler that was installed before:

- a Python handler (auto_checkpoint's queue: acted on at the next boundary; Python's own
  SIGINT handler: KeyboardInterrupt) is called as the signal would have called it;
- the default action (terminate) becomes :class:`~up_trainer.errors.TrainingInterrupted`, exit
  130/143 with one line, instead of a kill that leaves nothing said;
- an ignored signal stays ignored.

When the write fails, its error is what the run ends with; the signals recorded meanwhile are
logged and dropped (the run is ending anyway). Handlers exist only on the main thread: the
background writer itself is never interrupted by them, and only the main thread's waits need
holding.
"""
import contextlib
import logging
import signal
import threading

from ..errors import TrainingInterrupted

log = logging.getLogger("up")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
_holding = threading.local()  # .active: a block is holding (nested blocks add nothing)


@contextlib.contextmanager
def stop_signals_held():
    """Record SIGINT/SIGTERM during the block; act on them (as the module docstring says) once
    it has completed. Outside the main thread, or nested, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread() or getattr(_holding, "active", False):
        yield
        return
    pending = []

    def record(signum, frame):
        pending.append(signum)

    previous = {sig: signal.signal(sig, record) for sig in STOP_SIGNALS}
    _holding.active = True
    try:
        yield
    except BaseException:
        if pending:
            log.warning("%s received during a checkpoint write that failed: the run ends with the write's error",
                        ", ".join(signal.Signals(s).name for s in dict.fromkeys(pending)))
        raise
    finally:
        _holding.active = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for signum in dict.fromkeys(pending):  # each signal once, in arrival order
        _act(signum, previous[signum])


def _act(signum, handler):
    """What the signal would have done had it arrived now, under ``handler``."""
    if handler is signal.SIG_IGN:
        return
    if callable(handler):
        handler(signum, None)
        return
    name = signal.Signals(signum).name  # SIG_DFL (or a handler set outside Python): terminate
    raise TrainingInterrupted(EXIT_CODES[signum], f"{name} received during a checkpoint write; "
                              "the write was completed first, exiting")
