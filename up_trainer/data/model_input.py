"""The one step that turns a pipeline's pixels into what the model takes.

Readers decode to uint8 CxHxW and transforms keep the dtype they are given, so a sample leaves
its pipeline as uint8 (or as float in [0, 1] where a dataset holds float pixels, e.g. digits,
or a pipeline converted early). :class:`ModelInput` is the conversion that follows:

    uint8 x -> x / divisor, then (. - mean) / std        (divisor = 1 / scale: 255 by default)
    float x -> x in [0, 1] is 255 x on the uint8 scale, so x / (divisor / 255), then the same

:func:`split_model_input` takes a pipeline's trailing conversion steps (UP's ``to_tensor``,
``normalize``, ``custom_to_tensor``; torchvision's ToImage, ToDtype(float32), ToPureTensor,
Normalize) off it and folds them into one ModelInput. A pipeline without them still gets
``ModelInput()`` (scale 1/255, no normalization): models receive float [0, 1] as they always did.

Where it runs is ``dataset.normalize_on``: ``workers`` applies it at the end of each sample's
pipeline; ``device`` leaves the images uint8 through collation and the copy to the device, and
:func:`batch_to_model` converts the batch there (4x fewer bytes to move); ``auto`` (the config's
default) is ``device`` on an accelerator and ``workers`` on the CPU. The run's DataContext
(data/context.py) carries the choice to the data sets it builds; datasets constructed outside
a run's builder (tools, tests) convert on the device unless given a context or ``convert_in``. A
batch that still needs its conversion carries it under ``batch["model_input"]``, so every
consumer (training, evaluation, dry runs, hooks) converts it the same way by calling
:func:`batch_to_model` instead of ``to_device``.

The arithmetic is the one the separate steps did before (divide by 255, subtract the mean,
divide by the std, in float32), so a sample converted here equals the old pipeline's
bit for bit whenever its transforms are exact on uint8 (crops, flips, pads).
"""
import math
import numbers

import torch

from . import buffer_pool
from .context import DataContext
from .device import to_device
from .task_batches import TaskBatches

def _divisor_of(scale):
    """1 / scale, snapped to the integer it is meant to be (1 / (1 / 255) must divide by 255.0
    exactly, as the old ``div_(255.0)`` did)."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not scale > 0 or not math.isfinite(scale):
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    divisor = 1.0 / float(scale)
    nearest = round(divisor)
    return float(nearest) if nearest and abs(divisor - nearest) <= 1e-9 * divisor else divisor


def _channels(values, name):
    if values is None:
        return None
    values = [float(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"{name} must be finite numbers, got {values!r}")
    return tuple(values)


class ModelInput:
    """uint8 (or float [0, 1]) image(s) -> float32 model input: ``x * scale``, then
    ``(. - mean) / std`` when mean/std are given. Takes a CxHxW image, an NxCxHxW batch or a
    list of images (detection batches keep one tensor per image)."""

    def __init__(self, scale=1 / 255, mean=None, std=None):
        self.divisor = _divisor_of(scale)
        self.mean, self.std = _channels(mean, "mean"), _channels(std, "std")
        if (self.mean is None) != (self.std is None):
            raise ValueError("give mean and std together")
        if self.std is not None and not all(self.std):
            raise ValueError("std has a zero: division by zero")

    @property
    def scale(self):
        return 1.0 / self.divisor

    def __call__(self, images):
        if isinstance(images, (list, tuple)):
            return [self(image) for image in images]
        if images.dtype == torch.uint8 and images.dim() == 4 and len(images) > 1 and images.device.type == "cpu":
            return self._per_image(images)
        if images.dtype == torch.uint8:
            # on the CPU into a reused buffer (buffer_pool: fresh pages cost more than the pass)
            x = buffer_pool.empty_like(images).copy_(images)
            if self.divisor != 1.0:  # YOLOX's 0-255 input: the cast is the whole conversion
                x.div_(self.divisor)
        elif images.is_floating_point():
            # float pixels are [0, 1]: 255 x on the uint8 scale
            float_divisor = self.divisor / 255.0
            x = images.to(torch.float32)
            if x is images and (float_divisor != 1.0 or self.mean is not None):
                x = x.clone()  # never change the caller's tensor in place
            if float_divisor != 1.0:
                x.div_(float_divisor)
        else:
            raise TypeError(f"model input: expected uint8 or float images, got {images.dtype}")
        if self.mean is not None:
            mean = torch.as_tensor(self.mean, dtype=x.dtype, device=x.device).view(-1, 1, 1)
            std = torch.as_tensor(self.std, dtype=x.dtype, device=x.device).view(-1, 1, 1)
            x = x.sub_(mean).div_(std)
        return x

    def _per_image(self, images):
        """A uint8 batch on the CPU converted image by image into one output: the passes (cast,
        divide, subtract, divide) then run over one image that stays in the CPU's cache instead
        of streaming the whole float batch through memory once per pass. Same arithmetic, same
        layout (channels-last stays channels-last), same bits. (On an accelerator the batch is
        one kernel per pass.)"""
        out = buffer_pool.empty_like(images)
        if self.mean is None:
            for image, converted in zip(images, out):
                converted.copy_(image)
                if self.divisor != 1.0:
                    converted.div_(self.divisor)
            return out
        mean = torch.as_tensor(self.mean, dtype=out.dtype).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=out.dtype).view(-1, 1, 1)
        for image, converted in zip(images, out):
            converted.copy_(image).div_(self.divisor).sub_(mean).div_(std)
        return out

    # -- folding pipeline steps ---------------------------------------------------------------
    def then_divide(self, divisor):
        """This conversion followed by a division of its result by ``divisor``."""
        if self.mean is None:
            return ModelInput(1.0 / (self.divisor * divisor))
        return ModelInput(self.scale, self.mean, [s * divisor for s in self.std])

    def then_normalize(self, mean, std):
        """This conversion followed by ``(. - mean) / std``."""
        if self.mean is None:
            return ModelInput(self.scale, mean, std)
        mean, std = _channels(mean, "mean"), _channels(std, "std")
        n = max(len(self.mean), len(mean))
        m1, s1 = _broadcast(self.mean, n), _broadcast(self.std, n)
        m2, s2 = _broadcast(mean, n), _broadcast(std, n)
        return ModelInput(self.scale, [a + b * c for a, b, c in zip(m1, m2, s1)], [a * b for a, b in zip(s1, s2)])

    def padded(self, sizes, value):
        """This conversion for a batch padded (in uint8, before it) from images of ``sizes``
        [(h, w)]: the padding is then set to ``value`` in the converted space, as it was when
        images were padded after their conversion."""
        return PaddedModelInput(self, sizes, value)

    def __eq__(self, other):
        return type(other) is type(self) and (self.divisor, self.mean, self.std) == \
            (other.divisor, other.mean, other.std)

    def __hash__(self):
        return hash((self.divisor, self.mean, self.std))

    def __repr__(self):
        scale = f"1/{self.divisor:g}" if self.divisor != 1.0 else "1"
        norm = f", mean={list(self.mean)}, std={list(self.std)}" if self.mean is not None else ""
        return f"ModelInput(scale={scale}{norm})"


class PaddedModelInput(ModelInput):
    """A ModelInput for one batch whose images were padded before their conversion: after it,
    everything outside each image's own (h, w) becomes ``value`` (the padding's value in the
    model's input space, as ``dataset.pad_value`` always meant)."""

    def __init__(self, base, sizes, value):
        super().__init__(base.scale, base.mean, base.std)
        self.divisor = base.divisor
        self.sizes, self.value = [tuple(int(v) for v in size) for size in sizes], float(value)

    def __call__(self, images):
        out = super().__call__(images)
        for i, (h, w) in enumerate(self.sizes):
            image = out[i]
            image[..., h:, :] = self.value
            image[..., :h, w:] = self.value
        return out

    def __eq__(self, other):
        return super().__eq__(other) and (self.sizes, self.value) == (other.sizes, other.value)

    def __hash__(self):
        return hash((self.divisor, self.mean, self.std, tuple(self.sizes), self.value))


def _broadcast(values, n):
    return list(values) * n if len(values) == 1 else list(values)


# -- the pipeline's trailing conversion steps -----------------------------------------------------
def _fold(step, model_input):
    """``model_input`` followed by ``step`` when ``step`` is a conversion, else None.

    A transform of ours that is a final conversion says so with a method
    ``fold_model_input(model_input) -> ModelInput`` (UP's to_tensor, custom_to_tensor).
    torchvision's no-op conversions (ToImage, ToPureTensor, ToDtype to float32) are taken as what
    they always did here, on the float [0, 1] images datasets used to hand out: nothing. The
    model keeps receiving [0, 1] floats.
    """
    from torchvision.transforms import v2

    fold = getattr(step, "fold_model_input", None)
    if callable(fold):
        return fold(model_input)
    if isinstance(step, (v2.ToImage, v2.ToPureTensor)):
        return model_input
    if isinstance(step, v2.ToDtype):
        dtype = step.dtype
        return model_input if dtype is torch.float32 or (isinstance(dtype, dict) and _dict_to_float32(dtype)) else None
    if isinstance(step, v2.Normalize):
        return model_input.then_normalize(step.mean, step.std)
    return None


def _dict_to_float32(dtypes):
    from torchvision import tv_tensors

    images = [v for k, v in dtypes.items() if k in (tv_tensors.Image, torch.Tensor, "others")]
    return bool(images) and all(v is torch.float32 for v in images)


def _ops_of(transform):
    from torchvision.transforms import v2

    if transform is None:
        return []
    if isinstance(transform, v2.Compose):
        return list(transform.transforms)
    if isinstance(transform, (list, tuple)):
        return list(transform)
    return [transform]


def split_model_input(transform_list):
    """(the pipeline without its trailing conversion steps, their ModelInput).

    ``transform_list``: a list of transforms, a v2.Compose or None. The first return value has
    the input's form (a Compose stays a Compose; None when no step is left)."""
    from torchvision.transforms import v2

    ops = _ops_of(transform_list)
    cut = len(ops)
    while cut > 0 and _fold(ops[cut - 1], ModelInput()) is not None:
        cut -= 1
    model_input = ModelInput()
    for step in ops[cut:]:
        model_input = _fold(step, model_input)
    rest = ops[:cut]
    if isinstance(transform_list, v2.Compose) or transform_list is None:
        return (v2.Compose(rest) if rest else None), model_input
    return rest, model_input


# -- where it runs -----------------------------------------------------------------------------------
class FinalConversion:
    """Mixin for datasets: ``set_pipeline`` splits the transform, ``finish`` ends a sample
    (converting it under ``normalize_on: workers``), ``attach`` marks a collated batch whose
    conversion is left to the device."""

    model_input = ModelInput()
    convert_in_workers = False
    context = DataContext()  # the defaults (frozen); a run's data sets get the run's own (use_context)

    def use_context(self, context):
        """Read and convert as the run's DataContext says (data/context.py): its pixel limit and
        image cache in every read, its ``normalize_on`` for the conversion."""
        self.context = context
        self.convert_in(context.normalize_on)

    def set_pipeline(self, transform):
        """Keep ``transform`` without its trailing conversion steps; remember their ModelInput."""
        self.transform, self.model_input = split_model_input(transform)
        return self.transform

    def convert_in(self, where):
        """``workers``: samples end converted; ``device``: batches carry their conversion."""
        if where not in ("device", "workers"):
            raise ValueError(f"convert_in: {where!r} is not device or workers")
        self.convert_in_workers = where == "workers"

    def finish(self, image):
        return self.model_input(image) if self.convert_in_workers else image

    def attach(self, batch):
        if not self.convert_in_workers:
            batch["model_input"] = self.model_input
        return batch


def batch_to_model(batch, device, memory_format=None, non_blocking=True):
    """``batch`` on ``device``, its images converted by the ModelInput it carries (if any), 4-D
    image batches laid out in ``memory_format``: the one call between a loader and a model."""
    if isinstance(batch, TaskBatches):  # a multitask step: one batch per task
        return TaskBatches(batch_to_model(b, device, memory_format, non_blocking) for b in batch)
    if not isinstance(batch, dict) or batch.get("model_input") is None:
        if isinstance(batch, dict) and "model_input" in batch:
            batch = {k: v for k, v in batch.items() if k != "model_input"}
        return to_device(batch, device, non_blocking, memory_format)
    model_input = batch["model_input"]
    batch = to_device({k: v for k, v in batch.items() if k != "model_input"}, device, non_blocking)
    image = model_input(batch["image"])
    if memory_format is not None and isinstance(image, torch.Tensor) and image.dim() == 4:
        image = image.contiguous(memory_format=memory_format)
    batch["image"] = image
    return batch


def convert_batch(batch):
    """A batch's images converted where it is (no device move): for code that reads batches
    itself rather than through :func:`batch_to_model`."""
    if not isinstance(batch, dict) or "model_input" not in batch:
        return batch
    model_input = batch["model_input"]
    batch = {k: v for k, v in batch.items() if k != "model_input"}
    if model_input is not None:
        batch["image"] = model_input(batch["image"])
    return batch
