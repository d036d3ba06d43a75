"""What a run changes in its process, put back when an API call returns.

The engine keeps its own settings per run (the data sets' DataContext: data/context.py), but
the libraries under it hold process-wide state a run changes: torch's thread count and
determinism flags, the global RNGs, the ``up`` logger's handlers, signal handlers, Pillow's
decompression limit, DataLoader workers. Called from Python, all of that belongs to the
caller: :func:`left_as_found` records it before the call and restores it after, whether the
call returns or raises (the run's image cache goes with its last reference, collected here);
and :data:`ONE_CALL` refuses a second call while one runs. One record for every kind of
global state, so a setting the engine learns to change later is caught by the tests that
compare before and after (tests/api/test_api_train.py), not by a user.
"""
import contextlib
import gc
import logging
import os
import random
import signal
import threading

from ..errors import UserError

_ENV_KEYS = ("CUBLAS_WORKSPACE_CONFIG",)  # set by runtime.deterministic
FEEDER_JOIN_S = 5.0  # a closed queue's feeder flushes what it holds and ends at once


def _catchable_signals():
    out = []
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, getattr(signal, "SIGSTOP", None)):
            continue
        try:
            signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        out.append(sig)
    return out


class _Snapshot:
    """Everything a run may change, as it was."""

    def __init__(self):
        import numpy as np
        import torch
        from PIL import Image

        logger = logging.getLogger("up")
        self.logger = (list(logger.handlers), logger.level, logger.propagate, list(logger.filters))
        self.signals = {s: signal.getsignal(s) for s in _catchable_signals()}
        self.threads = torch.get_num_threads()
        self.deterministic = (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())
        self.cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
                      torch.backends.cudnn.allow_tf32)
        self.matmul = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)
        self.dtype = torch.get_default_dtype()
        self.grad = torch.is_grad_enabled()
        self.rng = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
                    np.random.get_state(), random.getstate())
        self.env = {k: os.environ.get(k) for k in _ENV_KEYS}
        self.pil_pixels = Image.MAX_IMAGE_PIXELS
        self.thread_ids = {t.ident for t in threading.enumerate()}

    def restore(self):
        import numpy as np
        import torch
        from PIL import Image

        from ..data.loader import end_loader_workers

        # loader iterators the run dropped shut their workers down when collected; the run's
        # image cache (held by its data sets' DataContext) closes its arena and files with them
        gc.collect()
        end_loader_workers()  # persistent workers, and any an interrupted iterator left
        self._join_queue_feeders()
        self._restore_logger()
        self._restore_signals()
        torch.set_num_threads(self.threads)
        torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
         torch.backends.cudnn.allow_tf32) = self.cudnn
        torch.set_float32_matmul_precision(self.matmul[0])
        torch.backends.cuda.matmul.allow_tf32 = self.matmul[1]
        torch.set_default_dtype(self.dtype)
        torch.set_grad_enabled(self.grad)
        cpu, cuda, numpy_state, python_state = self.rng
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        np.random.set_state(numpy_state)
        random.setstate(python_state)
        for key, value in self.env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        Image.MAX_IMAGE_PIXELS = self.pil_pixels

    def _join_queue_feeders(self):
        """The threads that fed the workers' queues end once their queue is closed (the workers
        are gone by now); waiting for them leaves no thread and no pipe behind."""
        for thread in threading.enumerate():
            if thread.ident not in self.thread_ids and thread.name == "QueueFeederThread":
                thread.join(timeout=FEEDER_JOIN_S)

    def _restore_logger(self):
        logger = logging.getLogger("up")
        handlers, level, propagate, filters = self.logger
        for handler in list(logger.handlers):
            if handler not in handlers:  # the run's console and train.log: train.log is closed
                logger.removeHandler(handler)
                handler.close()
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
        logger.filters[:] = filters

    def _restore_signals(self):
        changed = [s for s, h in self.signals.items() if signal.getsignal(s) is not h]
        for sig in changed:
            signal.signal(sig, self.signals[sig])
        if getattr(signal, "SIGCHLD", None) in changed:
            # DataLoader installs its SIGCHLD handler once per process and remembers it did; with
            # the handler put back, the next run's workers must install it again.
            from torch.utils.data._utils import signal_handling

            signal_handling._SIGCHLD_handler_set = False


class _OneCall:
    """The process-wide guard of the API's entries: one call at a time in a process.

    A run's state is the process's (the RNGs it seeds, the ``up`` logger whose handlers write
    its train.log, the image cache, every DataLoader worker, which the end of a call ends): two
    calls at once, in two threads or one nested in the other's hook, would draw from one
    another's random streams, log into one another's train.log and end one another's workers.
    Isolating them would mean per-call RNGs and loggers the engine does not have; so a second
    call is refused at once, in one line, and may be made once the first has returned."""

    def __init__(self):
        self._lock = threading.Lock()
        self.holder = None  # "up_trainer.train (thread MainThread)" while a call runs
        if hasattr(os, "register_at_fork"):
            # a forked child has no thread running the parent's call: it starts free
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self):
        self._lock = threading.Lock()
        self.holder = None

    @contextlib.contextmanager
    def held(self, name):
        if not self._lock.acquire(blocking=False):
            running = self.holder or "another call"
            raise UserError(f"up_trainer.{name}: {running} is running in this process; the API runs "
                            "one call at a time (they share the process's RNGs, logger and DataLoader "
                            "workers): call it again once that call has returned, or from another process")
        self.holder = f"up_trainer.{name} (thread {threading.current_thread().name})"
        try:
            yield
        finally:
            self.holder = None
            self._lock.release()


ONE_CALL = _OneCall()


@contextlib.contextmanager
def api_call(name):
    """What every API entry that runs the engine does: hold :data:`ONE_CALL` (``name``: the
    function, for the refusal's message), and leave the process as it was found."""
    with ONE_CALL.held(name), left_as_found():
        yield


@contextlib.contextmanager
def left_as_found():
    """Run the block; then restore what :class:`_Snapshot` records, even when it raised. The
    caller's own handlers on the ``up`` logger are set aside during the block, so the run's
    logging set-up (which replaces that logger's handlers) neither closes nor duplicates them."""
    snapshot = _Snapshot()
    logger = logging.getLogger("up")
    logger.handlers[:] = []
    try:
        yield snapshot
    finally:
        snapshot.restore()
