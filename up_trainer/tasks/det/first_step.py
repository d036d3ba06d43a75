"""``dataset.cache`` and a detection pipeline's first step: when that step is a deterministic
function of the image (a resize to a fixed rule: ``keep_ar_resize_max`` with one scale,
``fix_output_resize``, torchvision's Resize), the cache holds its output, so later epochs
neither decode nor resize.

Exact by construction: the cached pixels are the step's own output on the decoded image, and
the target is the step run on a stand-in image on PyTorch's ``meta`` device (a shape without
data, so the step cannot have read a pixel), the same at every epoch. A pipeline's first step
qualifies when, on the data set's first record,

1. it draws nothing from torch's, Python's or NumPy's random generators, its per-batch set-up
   (``begin_batch``) included, and gives the same result under two different seeds;
2. it runs on the stand-in and returns a uint8 image and a target holding no meta tensor;
3. that target equals, bit for bit, the one it gives with the real image, and the image has
   the shape the stand-in got.

Otherwise (a random first step: flips, mosaic, multi-scale) the cache holds decoded files.
"""
import random
import weakref

import numpy as np
import torch
from torchvision import __version__ as torchvision_version
from torchvision import tv_tensors
from torchvision.transforms import v2

from ...protocols import PerBatch
from ...data.readers import PIL_MODE
from .pipeline import from_pipeline, to_pipeline


class FirstStep:
    """The first op of a dataset's pipeline (``op``), the ops after it (``rest``), and the name
    under which the cache keeps its outputs (``step_id``)."""

    def __init__(self, op, rest, color_mode):
        self.op, self.rest = op, rest
        self._targets = {}  # image_id -> target after the step: computed once per process
        self.mode = PIL_MODE[color_mode]
        self.channels = 1 if self.mode == "L" else 3
        # what the pixels went through, torchvision's version included (its kernels make them)
        self.step_id = f"{color_mode} {op!r} (torchvision {torchvision_version})"

    def target(self, dataset, record):
        """(image shape, target) after the step, from a stand-in image with the record's size."""
        stand_in = torch.empty((self.channels, record["height"], record["width"]), dtype=torch.uint8, device="meta")
        image, target = self.op(*to_pipeline(stand_in, dataset.target_of(record)))
        return tuple(image.shape), target

    def real(self, dataset, record):
        """(image, target) after the step on the decoded image."""
        image, target = dataset.load(record)
        dataset._check_size(image, record)
        return self.op(*to_pipeline(image, target))

    def sample(self, dataset, record, cache):
        """The record through the whole pipeline, the step's pixels from the cache."""
        known = self._targets.get(record["image_id"])
        if known is None:
            known = self._targets[record["image_id"]] = self.target(dataset, record)[1]
        # the later steps get their own tensors (a transform may change its input in place)
        target = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in known.items()}

        def produce():  # kept height x width x channels: torchvision's uint8 resize lays its output out so
            image, _ = self.real(dataset, record)
            return image.as_subclass(torch.Tensor).permute(1, 2, 0).contiguous().numpy()
        pixels = cache.fetch(record["file"], self.mode, self.step_id, produce)
        image = tv_tensors.Image(torch.from_numpy(pixels).permute(2, 0, 1))
        if self.rest is not None:
            image, target = self.rest(image, target)
        return from_pipeline(image, target)


def _rng_state():
    return torch.default_generator.get_state(), random.getstate(), np.random.get_state()


def _set_rng_state(state):
    torch.default_generator.set_state(state[0])
    random.setstate(state[1])
    np.random.set_state(state[2])


def _same_rng(a, b):
    return torch.equal(a[0], b[0]) and a[1] == b[1] and a[2][0] == b[2][0] and np.array_equal(a[2][1], b[2][1]) \
        and a[2][2:] == b[2][2:]


def _equal(a, b):
    """Bit-for-bit equality of targets: same keys, tensors of the same class, dtype, values."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return type(a) is type(b) and a.dtype == b.dtype and a.device == b.device and a.shape == b.shape \
            and bool(torch.equal(a.as_subclass(torch.Tensor), b.as_subclass(torch.Tensor))) \
            and getattr(a, "canvas_size", None) == getattr(b, "canvas_size", None)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _probe(dataset):
    """A FirstStep when the dataset's pipeline starts with a step that qualifies, else None."""
    transform = getattr(dataset, "transform", None)
    records = getattr(dataset, "records", None)
    if transform is None or not records:
        return None
    if any(not isinstance(r.get("file"), str) or r.get("embedded") for r in records):
        return None
    reader = getattr(dataset, "reader", None)
    if not getattr(reader, "exif_transpose", True):
        return None  # the cache holds images decoded the default way only
    ops = list(transform.transforms) if isinstance(transform, v2.Compose) else [transform]
    step = FirstStep(ops[0], v2.Compose(ops[1:]) if len(ops) > 1 else None, getattr(reader, "color_mode", "RGB"))
    record = records[0]
    saved = _rng_state()
    try:
        results = []
        for seed in (1, 2):
            torch.default_generator.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed)
            before = _rng_state()
            if isinstance(step.op, PerBatch):
                step.op.begin_batch()
            try:
                results.append(step.target(dataset, record))
            finally:
                if isinstance(step.op, PerBatch):
                    step.op.end_batch()
            if not _same_rng(before, _rng_state()):
                return None
        (shape, target), (shape2, target2) = results
        if shape != shape2 or not _equal(target, target2) or _holds_meta(target):
            return None
        image, real_target = step.real(dataset, record)
        if image.dtype != torch.uint8 or tuple(image.shape) != shape or not _equal(real_target, target):
            return None
        return step
    except Exception:  # anything the stand-in cannot go through: the step needs real pixels
        return None
    finally:
        _set_rng_state(saved)


def _holds_meta(value):
    if isinstance(value, torch.Tensor):
        return value.is_meta
    if isinstance(value, dict):
        return any(_holds_meta(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_meta(v) for v in value)
    return False


def first_step(dataset):
    """The dataset's cacheable first step (probed once per pipeline), or None."""
    memo = dataset.__dict__.get("_first_step")
    if memo is None or memo[0] is not dataset.transform:
        memo = (dataset.transform, _probe(dataset))
        dataset._first_step = memo
    return memo[1]


def cached_first_step(dataset):
    """(step, cache) when the dataset's image cache (its DataContext's) holds its first step, else None."""
    cache = dataset.context.image_cache
    if cache is None or not cache.steps:
        return None
    memo = dataset.__dict__.get("_cached_step")
    if memo is None or memo[0]() is not cache or memo[1] is not dataset.transform:
        step = first_step(dataset)
        held = step is not None and step.step_id in cache.steps
        memo = (weakref.ref(cache), dataset.transform, step if held else None)
        dataset._cached_step = memo
    return (memo[2], cache) if memo[2] is not None else None


def step_files(dataset):
    """The cache's plan for a dataset whose first step qualifies: (path, mode, (c, h, w), step id)
    per record, the shapes from the stand-in (one run per distinct image size); else None."""
    step = first_step(dataset)
    if step is None:
        return None
    shapes, files = {}, []
    for record in dataset.records:
        size = (record["height"], record["width"])
        if size not in shapes:
            shapes[size] = step.target(dataset, record)[0]
        files.append((record["file"], step.mode, shapes[size], step.step_id))
    return files
