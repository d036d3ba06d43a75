"""Measuring activation memory and time per candidate, and fitting them to input size.

Activation memory, on every device, is the bytes of the distinct storages autograd keeps
for backward: each tensor passed to a ``torch.autograd.graph.saved_tensors_hooks`` pack hook
during the forward, parameters excluded, plus the inputs a checkpointed call holds for its
recomputation. On CUDA the hook additionally reads ``torch.cuda.max_memory_allocated`` so the
budget can cover what the saved tensors do not (weights, gradients, optimizer state,
workspaces): ``overhead = peak - activation bytes``, fitted like the rest.

Each saved storage is attributed to the set of candidate units that saved it (``<outside>``
for the rest of the model) and the set of units it was an input of. Storages with the same
two sets form a group; for a set S of checkpointed units, a group stays in memory iff one of
its savers is not in S or it is an input of a unit in S. That predicts the bytes of any plan
exactly from one un-checkpointed forward (boundary tensors shared by two blocks are neither
double-counted nor wrongly dropped). Group bytes and unit times are then fitted linearly in
the number of input elements across the warmup iterations.
"""
import logging
import time
from contextlib import contextmanager

import torch

log = logging.getLogger("up")

OUTSIDE = "<outside>"
HELD = "<checkpoint-input>"  # saver name for inputs a checkpointed call keeps
R2_WARN = 0.9

_CURRENT = []  # the recorders active in this process (innermost last)


def current():
    return _CURRENT[-1] if _CURRENT else None


def tensors_in(obj, depth=3):
    """Tensors in args/kwargs, looking into lists, tuples and dicts."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth and isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors_in(v, depth - 1)
    elif depth and isinstance(obj, dict):
        for v in obj.values():
            yield from tensors_in(v, depth - 1)


def _storage(t):
    try:
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):  # sparse / tensor subclasses
        return ("id", id(t)), t.numel() * t.element_size()


def input_elements(image):
    """Elements the model effectively sees: numel of a batch tensor; for a list of images (a
    detection batch, padded to its largest image inside the model) count * C * max H * max W."""
    if isinstance(image, torch.Tensor):
        return image.numel()
    imgs = list(image)
    if not imgs:
        return 0
    c = imgs[0].shape[0] if imgs[0].dim() == 3 else 1
    return len(imgs) * c * max(i.shape[-2] for i in imgs) * max(i.shape[-1] for i in imgs)


def size_key(image, bucket):
    """(bucket key, elements at the bucket's rounded-up size) of a batch's image entry."""
    def up(v):
        return -(-int(v) // bucket) * bucket
    if isinstance(image, torch.Tensor):
        shape = list(image.shape)
        if len(shape) >= 2:
            shape[-2:] = [up(shape[-2]), up(shape[-1])]
    else:
        imgs = list(image)
        c = imgs[0].shape[0] if imgs and imgs[0].dim() == 3 else 1
        shape = [len(imgs), c, up(max((i.shape[-2] for i in imgs), default=0)),
                 up(max((i.shape[-1] for i in imgs), default=0))]
    n = 1
    for v in shape:
        n *= int(v)
    return tuple(int(v) for v in shape), n


class Recorder:
    """Saved-for-backward bytes of one forward; with ``detail`` attributed to units."""

    def __init__(self, module, detail=False, sync=None):
        self.params = {_storage(p)[0] for p in module.parameters()}
        self.storages = {}  # storage key -> [nbytes, savers, inputs_of]
        self.stack = []  # units whose forward is running
        self.detail = detail
        self.times = {}  # unit -> seconds (detail only)
        # CUDA: wall time between synchronizations. CPU: process CPU time, which other
        # processes on a shared machine do not inflate the way they inflate wall time.
        self.sync = sync

    def _entry(self, t):
        key, nb = _storage(t)
        if key in self.params:
            return None
        e = self.storages.get(key)
        if e is None:
            e = self.storages[key] = [nb, set(), set()]
        return e

    def pack(self, t):
        e = self._entry(t)
        if e is not None:
            e[1].add(self.stack[-1] if (self.detail and self.stack) else OUTSIDE)
        return t

    def held(self, args, kwargs):
        """Inputs of a checkpointed call: kept alive by checkpoint for the recomputation."""
        for t in tensors_in((args, kwargs)):
            e = self._entry(t)
            if e is not None:
                e[1].add(HELD)

    def run_unit(self, unit, fn, args, kwargs):
        """Run an un-checkpointed unit, attributing what it saves and timing it."""
        if self.detail:
            for t in tensors_in((args, kwargs)):
                e = self._entry(t)
                if e is not None:
                    e[2].add(unit)
        clock = time.perf_counter if self.sync else time.process_time
        if self.sync:
            self.sync()
        t0 = clock()
        self.stack.append(unit)
        try:
            return fn(*args, **kwargs)
        finally:
            self.stack.pop()
            if self.sync:
                self.sync()
            self.times[unit] = self.times.get(unit, 0.0) + clock() - t0

    @property
    def total_bytes(self):
        return sum(e[0] for e in self.storages.values() if e[1])

    def groups(self):
        """{"saver,saver|input_of,...": bytes} over storages saved or used as unit inputs."""
        out = {}
        for nb, savers, inputs in self.storages.values():
            if savers or inputs:
                key = ",".join(sorted(savers)) + "|" + ",".join(sorted(inputs))
                out[key] = out.get(key, 0) + nb
        return out


@contextmanager
def recording(recorder):
    _CURRENT.append(recorder)
    try:
        with torch.autograd.graph.saved_tensors_hooks(recorder.pack, _identity):
            yield recorder
    finally:
        _CURRENT.remove(recorder)


def _identity(t):
    return t


def measure(module, fn, *args, **kwargs):
    """(result, activation bytes) of ``fn(*args, **kwargs)`` - checkpointed calls included."""
    rec = Recorder(module)
    with recording(rec):
        out = fn(*args, **kwargs)
    return out, rec.total_bytes


# -- fitting -------------------------------------------------------------------------------
class LinearFit:
    """y = a * n + b by least squares; through the origin when all n are equal."""

    def __init__(self, ns, ys):
        k = len(ns)
        mn, my = sum(ns) / k, sum(ys) / k
        sxx = sum((n - mn) ** 2 for n in ns)
        if sxx == 0:
            self.a, self.b = (my / mn if mn else 0.0), 0.0
        else:
            self.a = sum((n - mn) * (y - my) for n, y in zip(ns, ys)) / sxx
            self.b = my - self.a * mn
        syy = sum((y - my) ** 2 for y in ys)
        sse = sum((y - self(n)) ** 2 for n, y in zip(ns, ys))
        self.r2 = 1.0 if syy == 0 else 1.0 - sse / syy

    def __call__(self, n):
        return max(0.0, self.a * n + self.b)


def _median(v):
    v = sorted(v)
    k = len(v)
    return 0.0 if not k else (v[k // 2] if k % 2 else (v[k // 2 - 1] + v[k // 2]) / 2)


class RobustFit(LinearFit):
    """Theil-Sen line (median pairwise slope, median intercept): timings on a shared machine
    have outliers (a descheduled thread makes one call 100x slower) that least squares follows.
    Through the origin (median ratio) when all n are equal."""

    def __init__(self, ns, ys):
        slopes = [(ys[j] - ys[i]) / (ns[j] - ns[i]) for i in range(len(ns)) for j in range(i + 1, len(ns))
                  if ns[j] != ns[i]]
        if slopes:
            self.a = _median(slopes)
            self.b = _median([y - self.a * n for n, y in zip(ns, ys)])
        else:
            self.a, self.b = _median([y / n for n, y in zip(ns, ys) if n]), 0.0
        my = sum(ys) / len(ys)
        syy = sum((y - my) ** 2 for y in ys)
        sse = sum((y - self(n)) ** 2 for n, y in zip(ns, ys))
        self.r2 = 1.0 if syy == 0 else 1.0 - sse / syy


def parse_group(key):
    savers, _, inputs = key.partition("|")
    return frozenset(s for s in savers.split(",") if s), frozenset(s for s in inputs.split(",") if s)


class FittedProfile:
    """Per-group bytes, per-unit seconds and (CUDA) overhead as functions of input elements."""

    def __init__(self, samples, name="memory_checkpoint"):
        ns = [s["n"] for s in samples]
        keys = sorted({k for s in samples for k in s["groups"]})
        self.groups = [(*parse_group(k), LinearFit(ns, [s["groups"].get(k, 0) for s in samples])) for k in keys]
        units = sorted({u for s in samples for u in s["times"]})
        self.times = {u: RobustFit(ns, [s["times"].get(u, 0.0) for s in samples]) for u in units}
        overheads = [s.get("overhead") for s in samples]
        self.overhead = LinearFit(ns, overheads) if all(o is not None for o in overheads) else None
        self.units = sorted({u for savers, inputs, _ in self.groups for u in savers | inputs} - {OUTSIDE, HELD})
        self.memory_fit = LinearFit(ns, [float(s["total"]) for s in samples])
        self.time_fit = RobustFit(ns, [sum(s["times"].values()) for s in samples])
        # Fits are linear; real memory is not exactly (strided convs round up). Scale every
        # prediction by the worst under-prediction seen on the warmup samples.
        self.margin = 1.0
        for s in samples:
            pred = self.bytes_at(s["n"], frozenset())
            if pred > 0:
                self.margin = max(self.margin, s["total"] / pred)
        varied = len(set(ns)) > 1
        for label, fit in (("activation memory", self.memory_fit), ("forward time", self.time_fit)):
            if varied and fit.r2 < R2_WARN:
                log.warning("%s: %s fits input size poorly (R^2=%.2f over %d warmup iterations); plans may be "
                            "off - raise warmup_iters or use static mode", name, label, fit.r2, len(samples))

    def groups_at(self, n):
        return [(savers, inputs, fit(n)) for savers, inputs, fit in self.groups]

    def bytes_at(self, n, plan, groups=None):
        """Predicted activation bytes at ``n`` input elements with units ``plan`` checkpointed."""
        total = 0.0
        for savers, inputs, b in groups if groups is not None else self.groups_at(n):
            if (savers - plan) or (inputs & plan):
                total += b
        return total

    def seconds(self, unit, n):
        fit = self.times.get(unit)
        return fit(n) if fit else 0.0
