"""UP's "improve" detection augmentations (its improved RetinaNet recipe), on CxHxW tensors,
uint8 or float [0, 1], each keeping its input's dtype (no OpenCV):

- ``stitch_expand`` {expand_ratios, expand_prob}: zoom out by tiling the image 2 x 2 and taking
  a window U(1, expand_ratios) times the image's size that holds at least one whole box.
- ``crop`` {means, scale, crop_prob}: a random square window (the short side, or U(0.5, 1) of it
  with crop_prob) that holds at least one whole box; the image padded to a square with
  ``means`` when 100 draws find none.
- ``fix_output_resize`` {scales, max_size}: resize to exactly ``scales`` = [h, w].
- ``color_jitter`` {brightness, contrast, saturation, hue, brightness_delta, hue_delta,
  channel_shuffle, prob}: each configured change applied with probability ``prob``, in a random
  order.

In both windows a box stays when its centre is strictly inside the window and is clipped to it
(UP's rule), so no box leaves the image or becomes empty. Pixel values a UP file writes (``means``,
``brightness_delta``) are on UP's 0-255 scale: ``means`` is divided by 255 for a float image and
rounded to a level for a uint8 one. Windows, tiles and pads copy pixels, so the uint8 result is
the float one exactly; colour changes run in float and round once (the float result to the
nearest level). Every random number comes from torch's global generator, which the loader seeds per
batch, and the draws do not depend on the dtype.
"""
import numbers

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from ...errors import ConfigError
from ...registry import TRANSFORMS
from ..transforms import to_levels, unit_float
from .transforms import PER_BOX_KEYS, _mark_size, select_boxes
from .transform_ops import check_fill, fill_of, uniform


def _coin(prob):
    return float(torch.rand(())) < prob


def _randrange(n):
    """An integer in [0, n) (0 when n is 0: the window fills that side)."""
    return int(torch.randint(n, ())) if n > 0 else 0


def _probability(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ConfigError(name, f"expected a probability in [0, 1], got {value!r}")
    return float(value)


def holds_whole_box(boxes, roi):
    """Whether some box (a list of [x1, y1, x2, y2]) lies wholly inside ``roi``: UP's
    intersection over the box's area (the area floored at 1 pixel) reaching 1. Plain floats: a
    handful of boxes checked up to 100 times costs less than as tensor ops."""
    rx1, ry1, rx2, ry2 = roi
    for x1, y1, x2, y2 in boxes:
        inter = max(min(x2, rx2) - max(x1, rx1), 0.0) * max(min(y2, ry2) - max(y1, ry1), 0.0)
        if inter / max((x2 - x1) * (y2 - y1), 1.0) >= 1.0:
            return True
    return False


def boxes_in_window(boxes, roi):
    """(keep, boxes in the window's coordinates): the boxes whose centre is strictly inside
    ``roi``, clipped to it. A box keeps its centre, so a clipped box never becomes empty."""
    x1, y1, x2, y2 = roi
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    keep = (cx > x1) & (cx < x2) & (cy > y1) & (cy < y2)
    low, high = torch.tensor([x1, y1, x1, y1], dtype=boxes.dtype), torch.tensor([x2, y2, x2, y2], dtype=boxes.dtype)
    return keep, torch.minimum(torch.maximum(boxes, low), high) - torch.tensor([x1, y1, x1, y1], dtype=boxes.dtype)


def _inside(boxes, h, w):
    """Whether every box lies within the h x w image with a positive size (so each centre is
    strictly inside and clipping changes nothing)."""
    return bool(((boxes[:, 0] >= 0) & (boxes[:, 1] >= 0) & (boxes[:, 2] <= w) & (boxes[:, 3] <= h)
                 & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])).all())


def _new_canvas(image, target, pixels, keep, boxes, h, w):
    """The sample moved onto a new h x w canvas: pixels, the kept boxes (in its coordinates)."""
    if target.get("_resized"):  # an earlier resize fixed img_size: the content is now the canvas
        _mark_size(target, h, w)
    target = select_boxes(target, keep, boxes, (h, w))
    return tv_tensors.wrap(pixels, like=image) if isinstance(image, tv_tensors.Image) else pixels, target


@TRANSFORMS.register("stitch_expand")
class StitchExpand:
    """UP's ``stitch_expand``: with probability ``expand_prob``, the image tiled 2 x 2 and a
    window of U(1, expand_ratios) times its height and width cut from the tiling, drawn up to 10
    times until it holds one whole box (unchanged if none does, if the image has no box, or if
    the factor is within 1 % of 1). Boxes come from every tile the window covers."""

    def __init__(self, expand_ratios: float = 2.0, expand_prob: float = 0.5):
        if isinstance(expand_ratios, bool) or not isinstance(expand_ratios, (int, float)) or \
                not 1.0 <= expand_ratios <= 2.0:
            raise ConfigError("expand_ratios", f"expected a number in [1, 2] (the window lies in a 2 x 2 tiling), "
                              f"got {expand_ratios!r}")
        self.expand_ratios, self.expand_prob = float(expand_ratios), _probability(expand_prob, "expand_prob")

    def __call__(self, image, target):
        if not _coin(self.expand_prob):
            return image, target
        scale = uniform(1.0, self.expand_ratios)
        boxes = target["boxes"].as_subclass(torch.Tensor)
        if len(boxes) == 0 or scale - 1.0 <= 1e-2:
            return image, target
        _, h, w = image.shape
        out_h, out_w = int(scale * h), int(scale * w)
        # tiles in reading order: (0, 0), (w, 0), (0, h), (w, h)
        shifts = torch.tensor([[w * i, h * j] * 2 for j in range(2) for i in range(2)], dtype=boxes.dtype)
        tiled = (boxes[None] + shifts[:, None]).reshape(-1, 4)
        tiled_list = tiled.tolist()
        for _ in range(10):
            left, top = _randrange(2 * w - out_w), _randrange(2 * h - out_h)
            roi = (left, top, left + out_w, top + out_h)
            if not holds_whole_box(tiled_list, roi):
                continue
            keep, moved = boxes_in_window(tiled, roi)
            tiled_target = dict(target)
            for key in PER_BOX_KEYS:
                if key in target and len(target[key]) == len(boxes):
                    tiled_target[key] = target[key].repeat(4)
            tiled_target["boxes"] = tv_tensors.BoundingBoxes(tiled, format="XYXY", canvas_size=(2 * h, 2 * w))
            pixels = image.as_subclass(torch.Tensor).repeat(1, 2, 2)[:, top:top + out_h, left:left + out_w]
            return _new_canvas(image, tiled_target, pixels, keep, moved, out_h, out_w)
        return image, target

    def __repr__(self):
        return f"StitchExpand(expand_ratios={self.expand_ratios}, expand_prob={self.expand_prob})"


@TRANSFORMS.register("crop")
class Crop:
    """UP's ``crop``: a square window, its side the image's short side times U(0.5, 1) with
    probability ``crop_prob`` (else 1), drawn up to 100 times until it holds one whole box; when
    none does, the image padded at the right or bottom to a square with ``means`` (UP's 0-255
    pixel values, one or one per channel). An image without boxes is cut to a random square of
    its short side. ``scale`` is accepted for UP's files: UP derives a minimum box size from it
    that it never applies, so it changes nothing here either."""

    def __init__(self, means: object = 127.5, scale: int = 600, crop_prob: float = 0.5):
        self.means = check_fill(means, "means")
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or scale <= 0:
            raise ConfigError("scale", f"expected a positive number, got {scale!r}")
        self.scale, self.crop_prob = scale, _probability(crop_prob, "crop_prob")

    def __call__(self, image, target):
        _, h, w = image.shape
        boxes = target["boxes"].as_subclass(torch.Tensor)
        short = min(h, w)
        if len(boxes) == 0:
            left, top = _randrange(w - short), _randrange(h - short)
            return self._cut(image, target, boxes, (left, top, left + short, top + short))
        box_list = boxes.tolist()
        for _ in range(100):
            factor = uniform(0.5, 1.0) if _coin(self.crop_prob) else 1.0
            side = int(factor * short)
            left, top = _randrange(w - side), _randrange(h - side)
            roi = (left, top, left + side, top + side)
            if holds_whole_box(box_list, roi):
                return self._cut(image, target, boxes, roi)
        long = max(h, w)
        fill = fill_of(self.means, image.shape[0], "crop.means", dtype=image.dtype)
        pixels = fill.expand(image.shape[0], long, long).clone()
        pixels[:, :h, :w] = image.as_subclass(torch.Tensor)
        return _new_canvas(image, target, pixels, torch.ones(len(boxes), dtype=torch.bool), boxes, long, long)

    @staticmethod
    def _cut(image, target, boxes, roi):
        x1, y1, x2, y2 = roi
        h, w = image.shape[-2:]
        if (x1, y1, x2, y2) == (0, 0, w, h) and _inside(boxes, h, w):
            return image, target  # the window is the whole (square) image: nothing moves
        keep, moved = boxes_in_window(boxes, roi)
        pixels = image.as_subclass(torch.Tensor)[:, y1:y2, x1:x2]
        return _new_canvas(image, target, pixels, keep, moved, y2 - y1, x2 - x1)

    def __repr__(self):
        return f"Crop(means={self.means}, crop_prob={self.crop_prob})"


@TRANSFORMS.register("fix_output_resize")
class FixOutputResize:
    """UP's ``fix_output_resize``: resize to exactly ``scales`` = [h, w], height and width
    scaled apart (boxes follow both ratios). ``max_size`` and ``separate_wh`` are accepted for
    UP's files; UP's fixed-output resize uses neither, nor does this one. Records the resized
    size so that predictions map back to the original image."""

    def __init__(self, scales: list, max_size: object = None, separate_wh: bool = False,
                 interpolation: str = "bilinear"):
        if not isinstance(scales, (list, tuple)) or len(scales) != 2 or \
                any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in scales):
            raise ConfigError("scales", f"expected the output [h, w] as two positive integers, got {scales!r}")
        self.size = (int(scales[0]), int(scales[1]))
        self.resize = v2.Resize(self.size, interpolation=v2.InterpolationMode(interpolation), antialias=True)

    def __call__(self, image, target=None):
        same = tuple(image.shape[-2:]) == self.size  # already the output size: nothing to resample
        if target is None:
            return image if same else self.resize(image)
        if not same:
            image, target = self.resize(image, target)
        _mark_size(target, *self.size)
        return image, target

    def __repr__(self):
        return f"FixOutputResize(scales={list(self.size)})"


def _jitter_range(value, name, centre=1.0, bound=(0.0, float("inf")), clip_low=True):
    """UP's reading of a jitter amount: a number v means [centre - v, centre + v] (the low end
    floored at 0 where clip_low), a pair is taken as given within ``bound``; None when it is
    [centre, centre] (no change)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(name, f"a single number must be >= 0, got {value!r}")
        low, high = centre - value, centre + value
        low = max(low, 0.0) if clip_low else low
    elif isinstance(value, (list, tuple)) and len(value) == 2 and \
            all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
        low, high = float(value[0]), float(value[1])
        if not bound[0] <= low <= high <= bound[1]:
            raise ConfigError(name, f"expected [min, max] with {bound[0]} <= min <= max <= {bound[1]}, got {value!r}")
    else:
        raise ConfigError(name, f"expected a number or [min, max], got {value!r}")
    return None if low == high == centre else (float(low), float(high))


def _shift_hue(image, degrees):
    factor = (degrees / 360.0 + 0.5) % 1.0 - 0.5  # adjust_hue turns by a fraction in [-0.5, 0.5]
    return TF.adjust_hue(image, factor)


@TRANSFORMS.register("color_jitter")
class ColorJitterUP:
    """UP's detection ``color_jitter``: each configured change is drawn with probability
    ``prob`` (default 0, as in UP: a file that leaves prob out gets no jitter) and the drawn
    ones are applied in a random order. Factors as UP reads them: a number v for brightness,
    contrast or saturation means U(max(0, 1 - v), 1 + v), for hue U(-v, v) (torchvision's hue
    turn, within [-0.5, 0.5]); a pair [min, max] is used as given. ``brightness_delta`` adds
    U(0, d) in 0-255 units, ``hue_delta`` turns the hue by U(0, d) degrees (UP floors both
    ranges at 0), ``channel_shuffle`` permutes the channels. Values are clipped to the range
    ([0, 1] for float, 0-255 for uint8)."""

    def __init__(self, brightness: object = 0, contrast: object = 0, saturation: object = 0, hue: object = 0,
                 brightness_delta: object = 0, hue_delta: object = 0, channel_shuffle: bool = False,
                 prob: float = 0.0):
        self.prob = _probability(prob, "prob")
        self.ranges = {
            "brightness": _jitter_range(brightness, "brightness"),
            "contrast": _jitter_range(contrast, "contrast"),
            "saturation": _jitter_range(saturation, "saturation"),
            "hue": _jitter_range(hue, "hue", centre=0.0, bound=(-0.5, 0.5), clip_low=False),
            "brightness_delta": _jitter_range(brightness_delta, "brightness_delta", centre=0.0),
            "hue_delta": _jitter_range(hue_delta, "hue_delta", centre=0.0),
        }
        hue_range = self.ranges["hue"]
        # UP's files write hue: 18 with the default prob 0, where it is never drawn; drawn, it must be a turn.
        if self.prob > 0 and hue_range is not None and not -0.5 <= hue_range[0] <= hue_range[1] <= 0.5:
            raise ConfigError("hue", f"a hue turn within [-0.5, 0.5] is needed when prob > 0, got {hue!r}")
        self.channel_shuffle = bool(channel_shuffle)

    def draw(self, channels):
        """The changes for one image: [(name, amount)], in the order they apply."""
        changes = [(name, uniform(*span)) for name, span in self.ranges.items()
                   if span is not None and _coin(self.prob)]
        if self.channel_shuffle and _coin(self.prob):
            changes.append(("channel_shuffle", torch.randperm(channels)))
        return [changes[i] for i in torch.randperm(len(changes)).tolist()]

    def __call__(self, image, target=None):
        pixels = image.as_subclass(torch.Tensor)
        changes = self.draw(pixels.shape[0])
        as_uint8 = pixels.dtype == torch.uint8 and bool(changes)
        if as_uint8:  # changed in float, rounded once (torchvision's uint8 kernels truncate each step)
            pixels = unit_float(pixels)
        for name, amount in changes:
            if name == "brightness":
                pixels = TF.adjust_brightness(pixels, amount)
            elif name == "contrast":
                pixels = TF.adjust_contrast(pixels, amount)
            elif name == "saturation":
                pixels = TF.adjust_saturation(pixels, amount)
            elif name == "hue":
                pixels = TF.adjust_hue(pixels, amount)
            elif name == "brightness_delta":
                pixels = (pixels + amount / 255.0).clamp(0.0, 1.0)
            elif name == "hue_delta":
                pixels = _shift_hue(pixels, amount)
            else:
                pixels = pixels[amount]
        if as_uint8:
            pixels = to_levels(pixels)
        out = tv_tensors.wrap(pixels, like=image) if isinstance(image, tv_tensors.Image) else pixels
        return out if target is None else (out, target)

    def __repr__(self):
        given = ", ".join(f"{k}={v}" for k, v in self.ranges.items() if v is not None)
        return f"ColorJitterUP({given}, channel_shuffle={self.channel_shuffle}, prob={self.prob})"
