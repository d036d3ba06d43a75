"""DataLoaders whose worker processes are accounted for: each iterator's workers are recorded,
so that whatever ends a run (an exit, an error, an API call returning) can end them too; they
leave stop signals to the main process; a worker's DataError and a worker's death reach the
main process as one line; and with ``dataset.worker_transport: ring`` they hand batches over
through the batch ring (batch_ring.py)."""
import atexit
import gc
import multiprocessing
import signal
import weakref

from torch.utils.data import DataLoader, default_collate

from ..errors import DataError
from .batch_ring import BatchRing, RingCollate, unpack
from .sample_errors import worker_error_as_raised
from .worker_death import record_workers, worker_death


def ignore_stop_signals(worker_id):
    """DataLoader ``worker_init_fn``: workers ignore SIGTERM and SIGINT.

    SLURM preemption, ``scancel`` and a terminal's Ctrl-C signal the whole process group. The
    main process decides what a stop means (snapshot at the next boundary, exit 143/130);
    a worker that died of the same signal would instead make the main process fail with
    "DataLoader worker killed" before it gets there. Workers still end with the main process:
    it shuts them down, and each watches its parent.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


PERSISTENT_LOADERS = weakref.WeakSet()  # loaders whose workers outlive their iterations


_WORKERS = weakref.WeakSet()  # every worker process our loaders started


class WorkerTrackingLoader(DataLoader):
    """A DataLoader that records the worker processes of each iterator it starts, so that the
    exit handler below can find them (multiprocessing drops a process's target once started).

    ``transport``: how workers hand batches over; ``ring`` (batch_ring.py) sends their tensors
    through shared memory that is reused, where DataLoader's own way (``torch``) makes a fresh
    segment for each tensor. Without workers both are the same."""

    def __init__(self, *args, transport="ring", **kwargs):
        use_ring = transport == "ring" and kwargs.get("num_workers", 0) > 0
        if use_ring:
            kwargs["collate_fn"] = RingCollate(kwargs.get("collate_fn") or default_collate)
        super().__init__(*args, **kwargs)
        self._ring = None

    def __iter__(self):
        iterator = super().__iter__()
        if self.num_workers == 0:
            return iterator
        return _Batches(iterator, isinstance(self.collate_fn, RingCollate))

    def _start_ring(self):
        """A fresh ring for the workers about to start (forked ones only: they inherit it)."""
        ctx = self.multiprocessing_context or multiprocessing.get_context()
        if ctx.get_start_method() != "fork":
            self._ring = self.collate_fn.ring = None
            return
        slots = (self.prefetch_factor or 2) + 1  # what a worker has in flight, and one being filled
        try:
            self._ring = BatchRing(self.num_workers, slots, ctx)
        except (OSError, ValueError, ImportError):  # no shared memory or semaphores here: DataLoader's way
            self._ring = None
        self.collate_fn.ring = self._ring

    def _get_iterator(self):
        if isinstance(self.collate_fn, RingCollate):
            self._start_ring()
        # Workers are forked with SIGTERM/SIGINT blocked, so a group signal landing before their
        # worker_init_fn ignores it cannot kill them (the main process gets it once unblocked).
        # Children are recorded even when starting raises, so the exit handler finds them all.
        before = set(multiprocessing.active_children())
        blocked = {signal.SIGTERM, signal.SIGINT}
        masked = self.num_workers > 0 and hasattr(signal, "pthread_sigmask")
        if masked:
            signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            if self.num_workers > 0:
                # Objects that exist now move to the collector's permanent generation for the fork:
                # a worker's collections would otherwise walk them all and write every page that
                # holds one (copy-on-write), which ends with each worker owning a copy of the heap.
                gc.freeze()
            iterator = super()._get_iterator()
            # the ring lives as long as the iterator whose workers write it (a second iterator
            # of the same loader gets a ring of its own)
            iterator._batch_ring = self._ring
            record_workers(iterator)  # a worker's death names its worker id (worker_death.py)
            return iterator
        finally:
            gc.unfreeze()  # the main process collects as before; its workers keep theirs frozen
            _WORKERS.update(set(multiprocessing.active_children()) - before)
            if masked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)


class _Batches:
    """A worker-fed DataLoader iterator as the trainer reads it: a worker's DataError raised as
    the one line it was (sample_errors.py), not torch's text with the worker's traceback, and a
    worker's death as :class:`~up_trainer.data.worker_death.WorkerDied`; and with the ring (``unpacking``), each batch's descriptors copied out as it is handed on."""

    def __init__(self, iterator, unpacking):
        self._iterator = iterator
        self._unpacking = unpacking

    def __iter__(self):
        return self

    def __next__(self):
        try:
            batch = next(self._iterator)
        except DataError as exc:
            raised = worker_error_as_raised(exc)
            if raised is None:
                raise
            end_workers_of(self._iterator)
            raise raised from None
        except RuntimeError as exc:  # torch's text for a worker that died, as one line (worker_death.py)
            died = worker_death(exc)
            if died is None:
                raise
            end_workers_of(self._iterator)
            raise died from None
        return unpack(batch) if self._unpacking else batch

    def __len__(self):
        return len(self._iterator)


@atexit.register
def _end_loader_workers():
    end_loader_workers()


def end_loader_workers():
    """End every DataLoader worker before multiprocessing's own exit handler (registered
    earlier, so it runs later) does. That handler terminates daemon children with SIGTERM,
    which our workers ignore (:func:`ignore_stop_signals`), and then joins them without a
    timeout: any worker still alive at exit would hang the interpreter forever. Workers are
    alive at exit when their loader is persistent, or when a run ended (an interrupt, an
    error) while an iterator was still referenced from a traceback.

    Persistent loaders are shut down the polite way first; whatever remains is killed, which
    is safe: a worker holds nothing but batches nobody will read. The Python API calls this
    too when a run returns (api/isolation.py): no worker outlives the call.
    """
    for loader in list(PERSISTENT_LOADERS):
        iterator = getattr(loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
    alive = [process for process in list(_WORKERS) if process.is_alive()]
    if alive and hasattr(signal, "SIGCHLD"):
        # torch's SIGCHLD handler would raise "DataLoader worker is killed" at the first one
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for process in alive:
        process.kill()
    for process in alive:
        process.join(timeout=5)


def end_workers_of(iterator):
    """End the workers of an iterator that failed, at once. Torch's own shutdown asks them to
    stop and waits up to 5 s for each, then sends SIGTERM, which they ignore
    (:func:`ignore_stop_signals`): a worker busy with a batch nobody will read, or waiting for a
    ring slot, held the failed run's caller for tens of seconds. They hold nothing else."""
    from torch.utils.data._utils import signal_handling

    workers = getattr(iterator, "_workers", None) or []
    if getattr(iterator, "_worker_pids_set", False):  # so torch's SIGCHLD handler ignores these deaths
        signal_handling._remove_worker_pids(id(iterator))
        iterator._worker_pids_set = False
    for process in workers:
        if process.is_alive():
            process.kill()
    for process in workers:
        process.join(timeout=5)
    if hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
