"""Batches from DataLoader workers to the main process through shared memory that is reused.

torch hands every tensor a worker returns to the main process through a fresh shared-memory
segment: the worker copies the tensor into it and the main process maps it, and both touch each
page for the first time. For a decoded 853 x 640 image that costs the worker about 1.2 ms (some
3 us per 4 KiB page) against 0.04 ms for a plain copy, and the main process about as much again:
for a cached data set, where the image itself costs almost nothing, it is most of a sample's
cost.

The ring is one anonymous shared mapping made before the workers start (so the workers and the
main process see the same pages), cut into slots, ``slots_per_worker`` for each worker (4 GB of
address space in all, less on a machine with under 16 GB: :func:`slot_bytes_for`). A worker
copies its batch's tensors into its next slot and sends small descriptors (:class:`RingTensor`)
in their place; the main process copies them out into buffers it reuses (buffer_pool) as it
hands the batch on, then frees the slot. A slot is written again only once the main process has
freed it (one bounded semaphore per slot): a batch is never overwritten while it waits to be
read. A descriptor the main process drops unread (an epoch left early, a loader shut down) frees
its slot when it is collected. A batch larger than a slot, tensors already in shared memory,
and workers that are not forked go the ordinary way.
"""
import itertools
import math
import mmap
import os
import threading
import weakref

import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils import worker as _worker_module

from . import buffer_pool

# Address space of one ring, shared by its slots: pages are only backed once written, so it costs
# memory only where batches were (a detection batch of 8 uint8 images at 640 x 853: 13 MB per
# slot; as float32, converted in the workers, 52 MB; 256 images of 224 x 224 as float: 154 MB).
RING_BYTES = 4 * 2**30
RING_SHARE_OF_MEMORY = 4  # at most this share of the physical memory (a machine without overcommit)
SLOT_BYTES = None  # a fixed size per slot instead (tests)
MIN_SLOT_BYTES = 16 * 2**20
ALIGN = 64  # each tensor starts on a cache line (and any dtype's alignment)


def slot_bytes_for(num_workers, slots_per_worker):
    """Bytes per slot: the ring's address space split over its slots, at least 16 MB."""
    if SLOT_BYTES:
        return SLOT_BYTES
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = 16 * 2**30
    total = min(RING_BYTES, memory // RING_SHARE_OF_MEMORY)
    return max(MIN_SLOT_BYTES, total // (num_workers * slots_per_worker) // ALIGN * ALIGN)


_rings = weakref.WeakValueDictionary()  # ring id -> BatchRing, in the process that made it
_ring_ids = itertools.count()
_release_lock = threading.Lock()


class BatchRing:
    """``num_workers`` x ``slots_per_worker`` slots of ``slot_bytes`` in one shared mapping;
    ``ctx``: the loader's multiprocessing context (its semaphores reach forked workers)."""

    def __init__(self, num_workers, slots_per_worker, ctx, slot_bytes=None):
        self.id = (os.getpid(), next(_ring_ids))
        self.slot_bytes = slot_bytes = slot_bytes or slot_bytes_for(num_workers, slots_per_worker)
        self.per_worker = slots_per_worker
        self._map = mmap.mmap(-1, num_workers * slots_per_worker * slot_bytes)
        self._flat = torch.frombuffer(self._map, dtype=torch.uint8)
        self._free = [ctx.BoundedSemaphore(1) for _ in range(num_workers * slots_per_worker)]
        self._parent = os.getpid()
        self._taken = 0  # slots this worker process has used (each worker has its own copy)
        _rings[self.id] = self

    def view(self, offset, shape, strides, dtype):
        nbytes = _nbytes(shape, dtype)
        return self._flat[offset:offset + nbytes].view(dtype).as_strided(shape, strides)

    # -- in a worker -------------------------------------------------------------------------
    def pack(self, batch):
        """``batch`` with its CPU tensors copied into this worker's next slot and replaced by
        descriptors; ``batch`` itself when it does not fit a slot or outside a worker."""
        info = get_worker_info()
        tensors = {}
        for t in _tensors(batch):
            if t.device.type == "cpu" and t.numel() and not t.is_shared() and id(t) not in tensors:
                tensors[id(t)] = t
        need = sum(_aligned(t.numel() * t.element_size()) for t in tensors.values())
        if info is None or not tensors or need > self.slot_bytes:
            return batch
        slot = info.id * self.per_worker + self._taken % self.per_worker
        self._acquire(slot)
        self._taken += 1
        lease = Lease(self.id, slot, len(tensors))
        try:
            offset, packed = slot * self.slot_bytes, {}
            for key, t in tensors.items():
                strides = buffer_pool.dense_layout(t)
                self.view(offset, t.shape, strides, t.dtype).copy_(t)
                packed[key] = RingTensor(lease, offset, tuple(t.shape), strides, t.dtype)
                offset += _aligned(t.numel() * t.element_size())
            return _replace(batch, lambda t: packed.get(id(t), t))
        except BaseException:
            self._free[slot].release()
            raise

    def _acquire(self, slot):
        # The main process frees the slot once it has copied the batch out; it may legitimately
        # take long (a slow step), so wait without a limit, unless the main process is gone.
        while not self._free[slot].acquire(timeout=1.0):
            if os.getppid() != self._parent:
                raise RuntimeError("the main process ended while this DataLoader worker waited to send a batch")

    # -- in the main process -----------------------------------------------------------------
    def release(self, slot):
        self._free[slot].release()


class Lease:
    """One slot held by one batch: freed when all its ``count`` descriptors were copied out, or
    when the batch is dropped unread (collected) in the process that received it."""

    def __init__(self, ring_id, slot, count, received=False):
        self.ring_id, self.slot, self.count = ring_id, slot, count
        self.ring = _rings.get(ring_id) if received else None  # the main process's ring, kept alive
        self.released = not received  # a worker's own lease never frees the slot

    def __reduce__(self):
        return _received_lease, (self.ring_id, self.slot, self.count)

    def one_done(self):
        self.count -= 1
        if self.count <= 0:
            self.release()

    def release(self):
        with _release_lock:
            if self.released:
                return
            self.released = True
        if self.ring is not None:
            self.ring.release(self.slot)

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the semaphores go with it
            pass


def _received_lease(ring_id, slot, count):
    return Lease(ring_id, slot, count, received=True)


class RingTensor:
    """Where one tensor of a batch lies in a slot (what the worker sends instead of it)."""

    def __init__(self, lease, offset, shape, strides, dtype):
        self.lease, self.offset, self.shape, self.strides, self.dtype = lease, offset, shape, strides, dtype
        self._copy = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_copy"}

    def __setstate__(self, state):
        self.__dict__.update(state, _copy=None)

    def copy_out(self):
        """The tensor, copied from the slot into a buffer of the main process's own; once per
        descriptor however often it is asked (a batch may hold one tensor twice), so the slot is
        freed only after every tensor of the batch was read."""
        if self._copy is None:
            ring = self.lease.ring
            if ring is None:
                raise RuntimeError("a DataLoader batch outlived the loader that produced it")
            out = buffer_pool.empty_strided(self.shape, self.strides, self.dtype)
            out.copy_(ring.view(self.offset, self.shape, self.strides, self.dtype))
            self._copy = out
            self.lease.one_done()
        return self._copy

    def pin_memory(self, device=None):
        # DataLoader's pin-memory thread calls this on arrival: the slot is freed at once
        return self.copy_out().pin_memory()


def unpack(batch):
    """``batch`` with every descriptor replaced by its tensor (main process; a no-op for a
    batch that came the ordinary way)."""
    copies = {}

    def restore(item):
        if id(item) not in copies:
            copies[id(item)] = item.copy_out()
        return copies[id(item)]
    return _replace(batch, restore, RingTensor)


def _nbytes(shape, dtype):
    return math.prod(shape) * dtype.itemsize


def _aligned(nbytes):
    return -(-nbytes // ALIGN) * ALIGN


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value)


def _replace(obj, fn, kind=torch.Tensor):
    """``obj`` with every ``kind`` leaf replaced by ``fn(leaf)``; dicts, lists, tuples and
    namedtuples rebuilt with their types, anything else kept as it is."""
    if isinstance(obj, kind):
        return fn(obj)
    if isinstance(obj, dict):
        out = obj.copy()
        for key, value in obj.items():
            out[key] = _replace(value, fn, kind)
        return out
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_replace(v, fn, kind) for v in obj))
    if isinstance(obj, (list, tuple)):
        items = [_replace(v, fn, kind) for v in obj]
        return items if type(obj) is list else type(obj)(items)
    return obj


class RingCollate:
    """A loader's collate function, followed in a worker by :meth:`BatchRing.pack`; ``ring`` is
    set by the loader before its workers start (None: the ordinary way)."""

    def __init__(self, collate):
        self.collate = collate
        self.ring = None

    def __getattr__(self, name):  # the wrapped collate's attributes (e.g. MixCollate's)
        if name == "collate":
            raise AttributeError(name)
        return getattr(self.collate, name)

    def __call__(self, samples):
        if self.ring is None:
            return self.collate(samples)
        # default_collate stacks straight into a fresh shared-memory segment when it sees it runs
        # in a worker (to spare torch a copy): that is the page-faulting this ring avoids, so it
        # stacks into private memory here and the ring takes the (cheap) copy.
        saved = getattr(_worker_module, "_worker_info", None)
        _worker_module._worker_info = None
        try:
            batch = self.collate(samples)
        finally:
            _worker_module._worker_info = saved
        return self.ring.pack(batch)
