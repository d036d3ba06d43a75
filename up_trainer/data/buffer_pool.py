"""Reused float buffers for the model-input conversion on the CPU.

A detection batch converted to float32 is large (8 images of 640 x 853: 52 MB). glibc hands
allocations that size out as fresh memory maps and gives them back to the kernel when freed, so
every batch's conversion wrote into new pages and paid a page fault per 4 KiB: at 1 - 2 workers
that, not the pixels' arithmetic, bounded the main process (16 - 26 ms per image under load,
about 1 ms when the pages already exist).

The pool keeps the storages of earlier conversions and hands one out again once nothing else
holds it: a storage whose only owner is the pool (its use count is 1) cannot be seen by any
tensor, so writing into it changes nothing anyone holds. A batch a caller keeps (a hook, a
prefetch) keeps its storage busy and the pool allocates another; a storage moved to shared
memory (a sample a DataLoader worker sent to the main process) is dropped, never reused. Where
torch does not expose the use count, nothing is reused.
"""
import math
import threading

import torch

MAX_BUFFERS = 32  # storages kept (about two detection batches of 8 images, and a few spare)
MAX_BYTES = 256 * 2**20  # and their total size: idle ones beyond it are let go, oldest first
POOLED_FROM = 4 * 2**20  # empty_strided: smaller tensors come from malloc, which reuses its pages

_lock = threading.Lock()
_free = []  # UntypedStorage, most recently used last
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _dense_strides(tensor):
    """``tensor``'s strides when its elements fill its memory without gaps or overlap (any
    order of dimensions), else None."""
    expected = 1
    for stride, size in sorted(zip(tensor.stride(), tensor.shape)):
        if size == 1:
            continue
        if stride != expected:
            return None
        expected *= size
    return tensor.stride()


def _unused(storage):
    """Nothing but the pool holds ``storage``, and it was never moved to shared memory (a
    DataLoader worker hands its samples to the main process that way: the main process may
    still read those pages after the worker let go of them)."""
    try:
        return _use_count(storage._cdata) == 1 and not storage.is_shared()
    except Exception:  # noqa: BLE001 - a torch without it: never reuse
        return False


def _layout_of(tensor):
    """Dense strides for a copy of ``tensor``: its own when it is dense, else channels-last for
    a CxHxW view of HxWxC memory (a crop of a decoded image), else contiguous."""
    strides = _dense_strides(tensor)
    if strides is not None:
        return strides
    if tensor.dim() == 3 and tensor.stride(0) == 1:
        c, h, w = tensor.shape
        return (1, w * c, c)
    return torch.empty(0).new_empty(tensor.shape, device="meta").stride()


def empty_like(tensor, dtype=torch.float32):
    """An uninitialised CPU tensor of ``tensor``'s shape and memory layout (its dense
    equivalent: see :func:`_layout_of`) in ``dtype``, in a storage that an earlier conversion
    left behind when one is free and large enough."""
    if _use_count is None or tensor.device.type != "cpu":
        return torch.empty_like(tensor, dtype=dtype)
    return _take(tensor.shape, _layout_of(tensor), dtype)


def dense_layout(tensor):
    """Strides of a gap-free copy of ``tensor`` that keeps its memory order where it can."""
    return _layout_of(tensor)


def empty_strided(shape, strides, dtype):
    """An uninitialised CPU tensor of ``shape`` with the dense ``strides``, from the pool when
    it is large (small ones cost glibc nothing to allocate)."""
    if _use_count is None or math.prod(shape) * torch.empty((), dtype=dtype).element_size() < POOLED_FROM:
        return torch.empty_strided(shape, strides, dtype=dtype)
    return _take(shape, strides, dtype)


def empty(shape, dtype):
    """An uninitialised contiguous CPU tensor of ``shape`` and ``dtype`` from the pool."""
    if _use_count is None:
        return torch.empty(shape, dtype=dtype)
    return _take(shape, torch.empty(shape, device="meta").stride(), dtype)


def _take(shape, strides, dtype):
    need = max(1, math.prod(shape)) * torch.empty((), dtype=dtype).element_size()
    with _lock:
        # the smallest free storage that fits (a 480 x 480 image does not take an 800 x 800 one
        # while a fitting one is free)
        _free[:] = [s for s in _free if not s.is_shared()]  # sent to another process: never reused
        fitting = [s for s in _free if s.nbytes() >= need and _unused(s)]
        storage = min(fitting, key=lambda s: s.nbytes()) if fitting else None
        if storage is None:
            storage = torch.UntypedStorage(need)
            if len(_free) >= MAX_BUFFERS:
                busy = [s for s in _free if not _unused(s)]
                idle = [s for s in _free if _unused(s)]
                # drop the smallest idle one (else the oldest): the pool holds at most MAX_BUFFERS
                victim = min(idle, key=lambda s: s.nbytes()) if idle else busy[0]
                _free.remove(victim)
        else:
            _free.remove(storage)
        _free.append(storage)
        total = sum(s.nbytes() for s in _free)
        for idle in [s for s in _free[:-1] if _unused(s)]:  # oldest first
            if total <= MAX_BYTES:
                break
            _free.remove(idle)
            total -= idle.nbytes()
    out = torch.empty(0, dtype=dtype)
    out.set_(storage, 0, shape, strides)
    return out


def clear():
    """Forget every kept storage (their memory goes back once no tensor holds it)."""
    with _lock:
        _free.clear()
