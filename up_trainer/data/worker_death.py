"""A DataLoader worker that died (killed by a signal, or exited) as one line: which worker, how
it died, and the likely cause.

torch reports a dead worker with a RuntimeError (``DataLoader worker (pid 123) is killed by
signal: Killed.``), raised from its SIGCHLD handler or while the main process waits for a
batch: a traceback that names neither the worker nor a cause. :func:`worker_death` turns it
into :class:`WorkerDied`, which the trainer logs (train.log) after the exception snapshot was
written, and the CLI prints as one line with exit code 1: not a mistake in the user's input,
but not a bug of ours either.
"""
import re
import signal
import weakref

from ..errors import RunFailure

# torch's texts, from Python and from its C++ SIGCHLD check
_PIDS = re.compile(r"DataLoader worker \(pids?(?:\(s\))? ([\d, ]+)\) (?:is killed by signal|exited unexpectedly)")

# What a signal most likely means when it ends a DataLoader worker.
_CAUSES = {
    signal.SIGKILL: "most likely the kernel's out-of-memory killer (see dmesg): fewer dataset.num_workers, a "
                    "smaller dataset.batch_size or dataset.cache: disk need less memory",
    signal.SIGBUS: "most likely shared memory (/dev/shm) ran out: give the container more, or use fewer "
                   "dataset.num_workers",
    signal.SIGSEGV: "a crash in native code (an image library, or a transform's extension)",
}

_workers = weakref.WeakValueDictionary()  # pid -> worker process, as started
_worker_ids = {}  # pid -> its worker id in its loader


def record_workers(iterator):
    """Remember the worker id of each worker process of a DataLoader iterator just started."""
    for worker_id, process in enumerate(getattr(iterator, "_workers", None) or ()):
        if process.pid is not None:
            _workers[process.pid] = process
            _worker_ids[process.pid] = worker_id


class WorkerDied(RunFailure, RuntimeError):
    """A DataLoader worker died: one line, exit code 1."""

    def noted(self, note):
        return WorkerDied(f"{self}; {note}")


def worker_death(exc):
    """The :class:`WorkerDied` that ``exc`` (or an exception it came from) reports, or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, WorkerDied):
            return exc
        if isinstance(exc, RuntimeError):
            found = _PIDS.search(str(exc))
            if found:
                pids = [int(p) for p in found.group(1).replace(" ", "").split(",") if p]
                return WorkerDied("; ".join(_describe(pid) for pid in pids))
        exc = exc.__cause__ or exc.__context__
    return None


def _describe(pid):
    process = _workers.get(pid)
    worker = f"DataLoader worker {_worker_ids[pid]} (pid {pid})" if pid in _worker_ids else \
        f"DataLoader worker (pid {pid})"
    code = _exit_code(process)
    if code is None:
        return f"{worker} ended unexpectedly"
    if code >= 0:
        return f"{worker} exited with code {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"{worker} was killed by signal {-code}"
    cause = _CAUSES.get(sig, "sent by another process")
    return f"{worker} was killed by {sig.name}, {cause}"


def _exit_code(process):
    if process is None:
        return None
    try:
        process.join(timeout=1)  # the signal has ended it: this reaps it, and reads its status
        return process.exitcode
    except (AssertionError, ValueError, OSError):  # not our child (any more)
        return None
