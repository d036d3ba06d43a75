"""Box-aware transforms for detection pipelines (torchvision.transforms.v2 + tv_tensors).

Registered names usable in a dataset's ``transforms`` list (UP's names where UP has one):

- ``keep_ar_resize_max`` {scales, max_size}: keep-ratio resize of the short side to a scale
  (one picked at random per sample when several are given: multi-scale training), long side
  capped at max_size. Records the resized size so predictions map back to the original image.
- ``keep_ar_resize`` {scales, max_size, separate_wh}: UP's spelling of the same resize.
- ``flip`` {flip_p}: random horizontal flip of image and boxes.
- ``pad_to_stride`` {stride}: zero-pad right/bottom to a multiple of stride.
- ``normalize`` (from the shared registry: torchvision Normalize). A det model normalizes
  inside by default (``image_mean``/``image_std``); set those to 0/1 if the pipeline normalizes.

Any torchvision.transforms.v2 class works too (ColorJitter, RandomIoUCrop...): the dataset hands
the pipeline ``(tv_tensors.Image, {"boxes": tv_tensors.BoundingBoxes, ...})``. Every callable
takes and returns ``(image, target)``; random choices come from torch's global RNG, which the
loader seeds per sample.
"""
import math

import torch
from torchvision.transforms import v2

from ...errors import ConfigError
from ...registry import TRANSFORMS


def _mark_size(target, h, w):
    if isinstance(target, dict):
        target["img_size"] = torch.tensor([h, w], dtype=torch.int64)
        target["_resized"] = True


@TRANSFORMS.register("keep_ar_resize_max")
class KeepRatioResize:
    """Resize keeping the aspect ratio: short side -> scale, long side <= max_size."""

    def __init__(self, scales: list = (800,), max_size: int = 1333, interpolation: str = "bilinear"):
        scales = [scales] if isinstance(scales, int) else list(scales)
        if not scales or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in scales):
            raise ConfigError("scales", f"expected positive integers, got {scales!r}")
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
            raise ConfigError("max_size", f"expected a positive integer, got {max_size!r}")
        self.scales, self.max_size = scales, max_size
        self.interpolation = v2.InterpolationMode(interpolation)

    def target_size(self, h, w):
        scale = self.scales[int(torch.randint(len(self.scales), ()))] if len(self.scales) > 1 else self.scales[0]
        ratio = min(scale / min(h, w), self.max_size / max(h, w))
        return max(1, round(h * ratio)), max(1, round(w * ratio))

    def __call__(self, image, target=None):
        h, w = image.shape[-2:]
        nh, nw = self.target_size(h, w)
        resize = v2.Resize((nh, nw), interpolation=self.interpolation, antialias=True)
        if target is None:
            return resize(image)
        image, target = resize(image, target)
        _mark_size(target, nh, nw)
        return image, target

    def __repr__(self):
        return f"KeepRatioResize(scales={self.scales}, max_size={self.max_size})"


@TRANSFORMS.register("keep_ar_resize")
class KeepRatioResizeUP(KeepRatioResize):
    """UP's ``keep_ar_resize`` {scales, max_size, separate_wh}: the short side to one of
    ``scales`` (picked at random per sample), the long side capped at ``max_size``. Boxes follow
    the resized image's exact height and width ratios, which is UP's ``separate_wh: true``; with
    false UP scales boxes by the common factor, a sub-pixel difference."""

    def __init__(self, scales: list = (800,), max_size: int = 1333, separate_wh: bool = False,
                 interpolation: str = "bilinear"):
        if isinstance(scales, str):
            raise ConfigError("scales", "a Python expression is not evaluated here", "write the list, e.g. [800]")
        super().__init__(scales, max_size, interpolation)
        self.separate_wh = separate_wh

    def __repr__(self):
        return f"KeepRatioResizeUP(scales={self.scales}, max_size={self.max_size})"


@TRANSFORMS.register("flip")
class Flip(v2.RandomHorizontalFlip):
    """UP's ``flip``: horizontal flip of image and boxes with probability flip_p."""

    def __init__(self, flip_p: float = 0.5):
        if not 0.0 <= flip_p <= 1.0:
            raise ConfigError("flip_p", f"must be in [0, 1], got {flip_p}")
        super().__init__(p=flip_p)


@TRANSFORMS.register("pad_to_stride")
class PadToStride:
    """Zero-pad right and bottom so height and width are multiples of ``stride``; boxes keep
    their coordinates (the origin does not move)."""

    def __init__(self, stride: int = 32, fill: float = 0.0):
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
            raise ConfigError("stride", f"expected a positive integer, got {stride!r}")
        self.stride, self.fill = stride, fill

    def __call__(self, image, target=None):
        h, w = image.shape[-2:]
        ph, pw = math.ceil(h / self.stride) * self.stride - h, math.ceil(w / self.stride) * self.stride - w
        if isinstance(target, dict) and not target.get("_resized"):
            _mark_size(target, h, w)  # the content size, before padding
        if ph == 0 and pw == 0:
            return image if target is None else (image, target)
        pad = v2.Pad([0, 0, pw, ph], fill=self.fill)
        return pad(image) if target is None else pad(image, target)

    def __repr__(self):
        return f"PadToStride(stride={self.stride})"
