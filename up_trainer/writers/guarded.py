"""A summary writer that fails after it started never stops the training.

A tracking server that goes away mid-run (MLflow over HTTP, W&B, a network file system under
TensorBoard's logdir) used to end the run with a traceback, hours in, at the next log line or
at the final close. Every writer the logger opens is wrapped in :class:`KeptWriter`: the first
exception from a call is one warning naming the writer and the error, and that writer is
dropped for the rest of the run (train.log, metrics.csv and metrics.jsonl still get every
value, and the other writers of a ``summary_writer`` list go on). A full or read-only local
disk stays what it is everywhere else (writers/run_files.py): the run's error, exit 2, after
auto_checkpoint has saved.
"""
import logging

from .run_files import storage_error

log = logging.getLogger("up")


class KeptWriter:
    """``writer``'s interface; a failing call disables it instead of raising."""

    def __init__(self, name, writer):
        self._name, self._writer, self._failed = name, writer, False

    def __getattr__(self, attr):
        value = getattr(self._writer, attr)  # AttributeError: the writer does not take it (hasattr stays true)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            if self._failed:
                return None
            try:
                return value(*args, **kwargs)
            except Exception as exc:
                if storage_error(exc) is not None:
                    raise
                self._failed = True
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                log.warning("summary writer %s failed in %s (%s: %s); the run goes on without it "
                            "(train.log and metrics.csv keep every value)", self._name, attr, type(exc).__name__, first)
                return None
        return call

    @property
    def failed(self):
        return self._failed

    def __repr__(self):
        return repr(self._writer)
