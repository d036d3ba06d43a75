"""Transform pipelines from YAML: ``[{type, kwargs}, ...]`` -> one callable on an image tensor.

A ``type`` is looked up first in the TRANSFORMS registry (UP's names and user plugins), then
as a class name in ``torchvision.transforms.v2`` (``RandomAffine``, ``Normalize``, ...).
Datasets hand transforms a uint8 CxHxW tensor (in-memory float data sets, e.g. digits, a float
one in [0, 1]); every transform keeps the dtype it is given, and every random choice comes from
torch's global RNG, which the data loader seeds per sample.

A pipeline's trailing conversion steps (``to_tensor``, ``normalize``, ToDtype...) are taken off
it by the dataset and run once, as the model-input step (data/model_input.py). Where one sits
in the middle of a pipeline, it converts there: ``to_tensor`` and ToDtype(float) turn uint8 into
float [0, 1] (what datasets used to hand out), and the v2 transforms defined on float images
only (Normalize, GaussianNoise, RandomErasing, LinearTransformation) do the same with a uint8
input before their own work, so every pipeline that ran on float [0, 1] images still runs.
"""
import inspect
from typing import Optional

import torch
from torchvision.transforms import v2

from ..errors import ConfigError, did_you_mean, join_path
from ..registry import TRANSFORMS, check_kwargs


def _is_uint8_image(inpt):
    from torchvision import tv_tensors

    return isinstance(inpt, torch.Tensor) and inpt.dtype == torch.uint8 and \
        not isinstance(inpt, (tv_tensors.BoundingBoxes, tv_tensors.Mask, tv_tensors.KeyPoints))


def unit_float(image):
    """A uint8 image as float32 in [0, 1] (x / 255, as the decoders used to divide), a tv_tensors
    Image staying one; any other input unchanged."""
    from torchvision import tv_tensors

    if not _is_uint8_image(image):
        return image
    out = image.as_subclass(torch.Tensor).to(torch.float32).div_(255.0)
    return tv_tensors.wrap(out, like=image) if isinstance(image, tv_tensors.TVTensor) else out


class ToTensor:
    """UP's ``to_tensor``: a decoded image as float in [0, 1]. At the end of a pipeline it is
    part of the model-input step (a no-op fold: the model gets [0, 1]); in the middle it converts
    a uint8 image there. For images or (image, target)."""

    def __call__(self, *inputs):
        if len(inputs) == 1:
            return unit_float(inputs[0])
        return (unit_float(inputs[0]),) + tuple(inputs[1:])

    @staticmethod
    def fold_model_input(model_input):
        return model_input

    def __repr__(self):
        return "ToTensor()"


class FloatPixels:
    """Mixin for torchvision v2 transforms defined on float images only: a uint8 image is turned
    into float [0, 1] first (what datasets used to hand them), so the rest of the pipeline runs
    on float as it did."""

    def transform(self, inpt, params):
        return super().transform(unit_float(inpt), params)


class FloatThenRound:
    """Mixin for torchvision v2 photometric transforms: a uint8 image is changed in float [0, 1]
    and rounded to the nearest level once at the end. torchvision's uint8 kernels convert to
    float and truncate back after every step; chained, that drifts by levels (a colour jitter of
    four changes: 1.4 levels darker on average than the float result)."""

    def transform(self, inpt, params):
        if not _is_uint8_image(inpt):
            return super().transform(inpt, params)
        return to_levels(super().transform(unit_float(inpt), params))


def to_levels(image):
    """Float [0, 1] pixels rounded to the nearest uint8 level (a tv_tensors Image stays one)."""
    from torchvision import tv_tensors

    out = image.as_subclass(torch.Tensor).mul(255.0).round_().clamp_(0.0, 255.0).to(torch.uint8)
    return tv_tensors.wrap(out, like=image) if isinstance(image, tv_tensors.TVTensor) else out


class ColorJitter(FloatThenRound, v2.ColorJitter):
    """torchvision's ColorJitter; a uint8 image is jittered in float and rounded once."""


class Normalize(FloatPixels, v2.Normalize):
    """torchvision's Normalize, also for a uint8 image (converted to [0, 1] first)."""


class GaussianNoise(FloatPixels, v2.GaussianNoise):
    """torchvision's GaussianNoise, also for a uint8 image (converted to [0, 1] first)."""


class RandomErasing(FloatPixels, v2.RandomErasing):
    """torchvision's RandomErasing, also for a uint8 image (converted to [0, 1] first: the
    random fill is noise on the float scale)."""


class LinearTransformation(FloatPixels, v2.LinearTransformation):
    """torchvision's LinearTransformation, also for a uint8 image (converted to [0, 1] first)."""


class ToDtype(v2.ToDtype):
    """torchvision's ToDtype; a uint8 image converted to a float dtype comes out in [0, 1]
    whatever ``scale`` says: float pixels mean [0, 1] here, as they did when datasets handed out
    float images (on which ToDtype(float32) changed nothing)."""

    def transform(self, inpt, params):
        dtype = self._dtype_for(inpt)
        if _is_uint8_image(inpt) and dtype is not None and dtype.is_floating_point:
            return unit_float(inpt).to(dtype)
        return super().transform(inpt, params)

    def _dtype_for(self, inpt):
        from torchvision import tv_tensors

        if not isinstance(self.dtype, dict):
            return self.dtype
        for key in (type(inpt), tv_tensors.Image if isinstance(inpt, tv_tensors.Image) else torch.Tensor, "others"):
            if key in self.dtype:
                return self.dtype[key]
        return None


# v2 class names a config may write that are replaced by the versions above
FLOAT_INPUT_VERSIONS = {cls.__name__: cls for cls in (Normalize, GaussianNoise, RandomErasing,
                                                       LinearTransformation, ToDtype, ColorJitter)}

TRANSFORMS.register("to_tensor")(ToTensor)
# UP's classification names for the torchvision transforms they wrap.
for _name, _cls in {
    "torch_random_resized_crop": v2.RandomResizedCrop,
    "torch_random_horizontal_flip": v2.RandomHorizontalFlip,
    "torch_color_jitter": ColorJitter,
    "torch_resize": v2.Resize,
    "torch_center_crop": v2.CenterCrop,
    "normalize": Normalize,
}.items():
    TRANSFORMS.register(_name)(_cls)


def _as_uint8(op, image):
    """Run a uint8-only v2 op (posterize, equalize...) on a float [0, 1] image."""
    if image.dtype == torch.uint8:
        return op(image)
    out = op((image.clamp(0, 1) * 255).round().to(torch.uint8))
    return out.float().div_(255.0)


@TRANSFORMS.register("torch_auto_augmentation")
class AutoAugmentImageNet:
    """UP's ``torch_auto_augmentation``: the ImageNet AutoAugment policy (24 sub-policies, fill
    128), as torchvision v2.AutoAugment. UP's class takes ``size`` and ``scale`` and ignores
    them; so does this one."""

    def __init__(self, size: Optional[object] = None, scale: Optional[object] = None):
        self.op = v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET, fill=128)

    def __call__(self, image):
        return _as_uint8(self.op, image)

    def __repr__(self):
        return "AutoAugmentImageNet()"


@TRANSFORMS.register("torch_random_augmentation")
class RandAugmentUP:
    """UP's ``torch_random_augmentation`` {n, m, magnitude_std} as torchvision
    v2.RandAugment(num_ops=n, magnitude=m, 11 bins). Deviation (docs/up/data.rst): UP skips
    each chosen op with probability 0.5 and draws the magnitude from N(m, magnitude_std)."""

    def __init__(self, n: int = 2, m: int = 9, magnitude_std: float = 0.0):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError("n", f"expected an integer >= 1, got {n!r}")
        if not 0 <= m <= 10:
            raise ConfigError("m", f"expected a magnitude in [0, 10], got {m!r}")
        self.op = v2.RandAugment(num_ops=n, magnitude=int(round(m)), num_magnitude_bins=11)

    def __call__(self, image):
        return _as_uint8(self.op, image)

    def __repr__(self):
        return f"RandAugmentUP({self.op.num_ops}, {self.op.magnitude})"


@TRANSFORMS.register("torch_randerase")
class RandomErasingUP(RandomErasing):
    """UP's ``torch_randerase`` {probability, min_area, max_area, min_aspect, max_aspect, mode}:
    erase one rectangle with per-pixel normal noise (mode pixel, UP's default) or zeros (const),
    as torchvision v2.RandomErasing. Placed after normalize, as UP places it."""

    MODES = ("pixel", "const")

    def __init__(self, probability: float = 0.5, min_area: float = 0.02, max_area: float = 1 / 3,
                 min_aspect: float = 0.3, max_aspect: Optional[float] = None, mode: str = "pixel",
                 min_count: int = 1, max_count: Optional[int] = None):
        if mode not in self.MODES:
            raise ConfigError("mode", f"{mode!r} is not mapped", f"use one of {', '.join(self.MODES)}")
        if min_count != 1 or max_count not in (None, 1):
            raise ConfigError("max_count", "erasing several blocks per image is not mapped", "use 1")
        super().__init__(p=probability, scale=(min_area, max_area),
                         ratio=(min_aspect, max_aspect or 1 / min_aspect), value="random" if mode == "pixel" else 0)


# UP transform names with no mapping here: what each is in UP and what to use instead. Refused
# in one line (exit 2) rather than approximated.
UNMAPPED_UP_TRANSFORMS = {
    "torch_cutmix_mixup": ("UP's per-sample CutMix/MixUp (draws extra images from the dataset)",
                           "the training batch_fn batch_cutmixup (dataset.train.dataloader.kwargs.batch_fn)"),
    "mosaicv2": ("UP's YOLOX mosaic v2", "mosaic (UP's YOLOX mosaic)"),
    "normalize_inverse": ("UP's undo of normalize for visualisation", "nothing in a training pipeline"),
}


def torchvision_names():
    """Class names in torchvision.transforms.v2 a config may use."""
    return sorted(name for name, obj in vars(v2).items()
                  if inspect.isclass(obj) and issubclass(obj, v2.Transform) and obj is not v2.Transform)


def _lookup(name, path):
    if not isinstance(name, str):
        raise ConfigError(path, f"expected a transform name, got {type(name).__name__} {name!r}")
    if name in TRANSFORMS:
        return TRANSFORMS.get(name, path)
    if name in UNMAPPED_UP_TRANSFORMS:
        what, instead = UNMAPPED_UP_TRANSFORMS[name]
        raise ConfigError(path, f"{name} is {what}, which up-trainer does not map", f"instead: {instead}")
    tv_names = torchvision_names()
    if name in tv_names:
        return FLOAT_INPUT_VERSIONS.get(name) or getattr(v2, name)
    choices = sorted(set(TRANSFORMS.names()) | set(tv_names))
    hint = did_you_mean(name, choices) or "any torchvision.transforms.v2 class name, e.g. RandomAffine, Normalize"
    raise ConfigError(path, f"unknown transform {name!r}", hint)


def _interpolation(value, path):
    """YAML cannot spell an InterpolationMode; accept its value string ('bilinear') as UP does."""
    if not isinstance(value, str):
        return value
    try:
        return v2.InterpolationMode(value.lower())
    except ValueError:
        choices = [m.value for m in v2.InterpolationMode]
        raise ConfigError(path, f"unknown interpolation {value!r}",
                          did_you_mean(value.lower(), choices) or f"one of {', '.join(choices)}") from None


def _build_one(entry, path):
    if not isinstance(entry, dict):
        raise ConfigError(path, f"expected a mapping {{type, kwargs}}, got {type(entry).__name__}")
    for key in entry:
        if key not in ("type", "kwargs"):
            raise ConfigError(join_path(path, key), "unknown key", did_you_mean(key, ["type", "kwargs"]))
    if "type" not in entry:
        raise ConfigError(path, "missing 'type'")
    cls = _lookup(entry["type"], join_path(path, "type"))
    kwpath = join_path(path, "kwargs")
    kwargs = entry.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigError(kwpath, f"expected a mapping, got {type(kwargs).__name__}")
    kwargs = dict(kwargs)
    if "interpolation" in kwargs:
        kwargs["interpolation"] = _interpolation(kwargs["interpolation"], join_path(kwpath, "interpolation"))
    # Containers (RandomApply, RandomChoice, Compose) take a nested list of transforms.
    if isinstance(kwargs.get("transforms"), list):
        kwargs["transforms"] = _build_list(kwargs["transforms"], join_path(kwpath, "transforms"))
    check_kwargs(cls, kwargs, kwpath)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(join_path(kwpath, exc.path) if exc.path else kwpath, exc.message, exc.hint) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(kwpath, f"{entry['type']}: {exc}") from None


def _build_list(list_cfg, path):
    if not isinstance(list_cfg, (list, tuple)):
        raise ConfigError(path, f"expected a list of {{type, kwargs}}, got {type(list_cfg).__name__}")
    return [_build_one(entry, join_path(path, i)) for i, entry in enumerate(list_cfg)]


def build_transforms(list_cfg, path="transforms"):
    """One callable applying every configured transform in order, or None for none."""
    if list_cfg is None:
        return None
    ops = _build_list(list_cfg, path)
    if not ops:
        return None
    return v2.Compose(ops)
