"""Transform pipelines from YAML: ``[{type, kwargs}, ...]`` -> one callable on an image tensor.

A ``type`` is looked up first in the TRANSFORMS registry (UP's names and user plugins), then
as a class name in ``torchvision.transforms.v2`` (``RandomAffine``, ``Normalize``, ...).
Datasets hand transforms a float CxHxW tensor in [0, 1]; every random choice comes from
torch's global RNG, which the data loader seeds per sample.
"""
import inspect

from torchvision.transforms import v2

from ..errors import ConfigError, did_you_mean, join_path
from ..registry import TRANSFORMS, check_kwargs


class ToTensor:
    """UP's ``to_tensor``. Our datasets already yield float tensors, so this is a no-op that
    exists only so UP pipelines (``[..., to_tensor, normalize]``) load unchanged."""

    def __call__(self, image):
        return image

    def __repr__(self):
        return "ToTensor()"


TRANSFORMS.register("to_tensor")(ToTensor)
# UP's classification names for the torchvision transforms they wrap.
for _name, _cls in {
    "torch_random_resized_crop": v2.RandomResizedCrop,
    "torch_random_horizontal_flip": v2.RandomHorizontalFlip,
    "torch_color_jitter": v2.ColorJitter,
    "torch_resize": v2.Resize,
    "torch_center_crop": v2.CenterCrop,
    "normalize": v2.Normalize,
}.items():
    TRANSFORMS.register(_name)(_cls)


def torchvision_names():
    """Class names in torchvision.transforms.v2 a config may use."""
    return sorted(name for name, obj in vars(v2).items()
                  if inspect.isclass(obj) and issubclass(obj, v2.Transform) and obj is not v2.Transform)


def _lookup(name, path):
    if not isinstance(name, str):
        raise ConfigError(path, f"expected a transform name, got {type(name).__name__} {name!r}")
    if name in TRANSFORMS:
        return TRANSFORMS.get(name, path)
    tv_names = torchvision_names()
    if name in tv_names:
        return getattr(v2, name)
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
