"""Box-aware transforms for detection pipelines (torchvision.transforms.v2 + tv_tensors).

Registered names usable in a dataset's ``transforms`` list (UP's names where UP has one):

- ``keep_ar_resize_max`` {scales, max_size}: keep-ratio resize of the short side to a scale
  (one picked at random per sample when several are given: multi-scale training), long side
  capped at max_size. Records the resized size so predictions map back to the original image.
  UP's YOLOX forms: {max_size} alone (long side to max_size) and {random_size, scale_step}
  (long side to a size drawn once per batch), with padding_type / padding_val / min_size.
- ``keep_ar_resize`` {scales, max_size, separate_wh}: UP's spelling of the same resize.
- ``flip`` {flip_p}: random horizontal flip of image and boxes.
- ``pad_to_stride`` {stride}: zero-pad right/bottom to a multiple of stride.
- ``normalize`` (from the shared registry: torchvision Normalize). A det model normalizes
  inside by default (``image_mean``/``image_std``); set those to 0/1 if the pipeline normalizes.

Any torchvision.transforms.v2 class works too (ColorJitter, RandomIoUCrop...): the dataset hands
the pipeline ``(tv_tensors.Image, {"boxes": tv_tensors.BoundingBoxes, ...})``, the image uint8
(float [0, 1] for generated scenes); every transform here keeps its dtype. Every callable
takes and returns ``(image, target)``; random choices come from torch's global RNG, which the
loader seeds per sample.
"""
import math
from typing import Optional

import torch
from torchvision.transforms import v2

from ...errors import ConfigError
from ...registry import TRANSFORMS


# Inside a pipeline, ignore regions travel with the boxes, labelled 0 (real labels are 1..C),
# so any transform that drops or adds boxes (SanitizeBoundingBoxes, mosaic) keeps boxes, labels
# and areas aligned; the dataset splits them apart again when the pipeline ends.
PER_BOX_KEYS = ("labels", "area")


def _mark_size(target, h, w):
    if isinstance(target, dict):
        target["img_size"] = torch.tensor([h, w], dtype=torch.int64)
        target["_resized"] = True


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(name, f"expected a positive integer, got {value!r}")
    return value


@TRANSFORMS.register("keep_ar_resize_max")
class KeepRatioResize:
    """Resize keeping the aspect ratio, in one of three forms:

    - ``scales`` given: short side -> a scale (one picked at random per sample when several),
      long side <= ``max_size``;
    - ``random_size: [lo, hi]`` (UP's YOLOX multi-scale): long side -> k * ``scale_step`` with
      k drawn from lo..hi once per batch (every image of a batch gets the same size; see
      :meth:`begin_batch`), per sample where no batch is being drawn;
    - neither (UP's form): long side -> ``max_size``.

    ``padding_type: left_top`` then pads the image to a square of that size (``padding_val`` in
    UP's 0-255 pixel units); ``min_size`` drops boxes whose side ends at most that long (UP's
    filter, default 1 in the random_size form)."""

    PADDING_TYPES = ("left_top",)

    def __init__(self, scales: Optional[list] = None, max_size: int = 1333, interpolation: str = "bilinear",
                 random_size: Optional[list] = None, scale_step: int = 32, padding_type: Optional[str] = None,
                 padding_val: float = 0, min_size: Optional[float] = None, separate_wh: bool = False):
        if scales is not None:
            scales = [scales] if isinstance(scales, int) else list(scales)
            if not scales or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in scales):
                raise ConfigError("scales", f"expected positive integers, got {scales!r}")
        _positive_int(max_size, "max_size")
        if random_size is not None:
            if scales is not None:
                raise ConfigError("random_size", "give scales or random_size, not both")
            if len(random_size) != 2 or not all(isinstance(k, int) and not isinstance(k, bool) for k in random_size) \
                    or not 1 <= random_size[0] <= random_size[1]:
                raise ConfigError("random_size", f"expected [lo, hi] integers with 1 <= lo <= hi, got {random_size!r}")
            random_size = [int(k) for k in random_size]
            min_size = 1 if min_size is None else min_size
        if padding_type is not None and padding_type not in self.PADDING_TYPES:
            raise ConfigError("padding_type", f"{padding_type!r} is not mapped", f"use {', '.join(self.PADDING_TYPES)}")
        if padding_type is not None and scales is not None:
            raise ConfigError("padding_type", "pads to the square of random_size or max_size, not with scales",
                              "pad_to_stride pads a scales resize")
        self.scales, self.max_size = scales, max_size
        self.random_size, self.scale_step = random_size, _positive_int(scale_step, "scale_step")
        self.padding_type, self.padding_val, self.min_size = padding_type, float(padding_val), min_size
        self.separate_wh = separate_wh  # boxes always follow the exact height and width ratios
        self.interpolation = v2.InterpolationMode(interpolation)
        self._batch_side = None

    # A batch shares one random size: the seeded loader calls these around each batch.
    def begin_batch(self):
        if self.random_size is not None:
            self._batch_side = self._draw_side()

    def end_batch(self):
        self._batch_side = None

    def _draw_side(self):
        lo, hi = self.random_size
        return int(torch.randint(lo, hi + 1, ())) * self.scale_step

    def long_side(self):
        """The side the long edge goes to in the random_size / max_size forms."""
        if self.random_size is None:
            return self.max_size
        return self._batch_side if self._batch_side is not None else self._draw_side()

    def target_size(self, h, w, long_side=None):
        if self.scales is None:
            ratio = (long_side or self.long_side()) / max(h, w)
        else:
            scale = self.scales[int(torch.randint(len(self.scales), ()))] if len(self.scales) > 1 else self.scales[0]
            ratio = min(scale / min(h, w), self.max_size / max(h, w))
        return max(1, round(h * ratio)), max(1, round(w * ratio))

    def __call__(self, image, target=None):
        h, w = image.shape[-2:]
        side = self.long_side() if self.scales is None else None
        nh, nw = self.target_size(h, w, side)
        resize = v2.Resize((nh, nw), interpolation=self.interpolation, antialias=True)
        if target is None:
            image = resize(image)
        else:
            image, target = resize(image, target)
            _mark_size(target, nh, nw)
            if self.min_size is not None:
                target = drop_small_boxes(target, self.min_size)
        if self.padding_type is not None and side is not None and (nh, nw) != (side, side):
            # padding_val is in UP's 0-255 units: the nearest level of a uint8 image, / 255 for a float one
            fill = self.padding_val / 255.0 if image.is_floating_point() else round(self.padding_val)
            pad = v2.Pad([0, 0, side - nw, side - nh], fill=fill)
            return pad(image) if target is None else pad(image, target)
        return image if target is None else (image, target)

    def __repr__(self):
        if self.random_size is not None:
            return f"KeepRatioResize(random_size={self.random_size}, scale_step={self.scale_step})"
        if self.scales is None:
            return f"KeepRatioResize(max_size={self.max_size})"
        return f"KeepRatioResize(scales={self.scales}, max_size={self.max_size})"


def drop_small_boxes(target, min_size):
    """Keep the boxes (and their per-box values) whose width and height exceed min_size."""
    boxes = target["boxes"]
    keep = ((boxes[:, 2] - boxes[:, 0]) > min_size) & ((boxes[:, 3] - boxes[:, 1]) > min_size)
    return target if bool(keep.all()) else select_boxes(target, keep)


def select_boxes(target, keep, boxes=None, canvas_size=None):
    """A copy of target with only the boxes in ``keep`` (a bool mask), taken from ``boxes``
    (new coordinates, default the current ones) on ``canvas_size`` (h, w; default unchanged).
    Per-box values (labels, area) follow; ``boxes`` stays a tv_tensors.BoundingBoxes."""
    from torchvision import tv_tensors

    old = target["boxes"]
    boxes = old.as_subclass(torch.Tensor) if boxes is None else boxes
    target = dict(target)
    for key in PER_BOX_KEYS:
        if key in target and len(target[key]) == len(old):
            target[key] = target[key][keep]
    target["boxes"] = tv_tensors.BoundingBoxes(boxes[keep].to(torch.float32), format="XYXY",
                                               canvas_size=tuple(canvas_size or old.canvas_size))
    return target


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
        super().__init__(scales, max_size, interpolation, separate_wh=separate_wh)

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
    their coordinates (the origin does not move). ``fill`` on the float [0, 1] scale (a uint8
    image gets the nearest level)."""

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
        # fill is on the float [0, 1] scale: the nearest level for a uint8 image
        fill = self.fill if image.is_floating_point() else round(self.fill * 255)
        pad = v2.Pad([0, 0, pw, ph], fill=fill)
        return pad(image) if target is None else pad(image, target)

    def __repr__(self):
        return f"PadToStride(stride={self.stride})"
