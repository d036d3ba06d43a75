"""UP's single-image YOLOX augmentations on CxHxW tensors, uint8 or float [0, 1] (no OpenCV).

- ``random_perspective_yolox`` {degrees, translate, scale, shear, perspective, fill_color,
  border, max_try, clip_box}: one random affine (or projective) warp; boxes follow through
  their 4 corners, are clipped to the output and filtered by :func:`box_candidates`.
- ``random_perspective`` {the same kwargs}: UP's YOLOv5 form of the same warp (``scale`` one number).
- ``augment_hsv`` {hgain, sgain, vgain, color_mode}: random gains on hue, saturation, value.
- ``custom_to_tensor`` {norm_image}: UP's to-tensor for OpenCV images; here the pipeline's final
  conversion (:mod:`up_trainer.data.model_input` folds it into the model-input step).

Every transform keeps its input's dtype: a uint8 image (what readers decode to) comes out uint8,
computed in float where it has to be and rounded to the nearest level, so it is the float
path's result within rounding; a float image in [0, 1] comes out float. Pixel values a UP file
writes (``fill_color``) are on UP's 0-255 scale: divided by 255 for a float image, rounded to
the nearest level for a uint8 one. Every random number comes from torch's global generator,
which the loader seeds per batch.
"""
import math

import torch
from torchvision import tv_tensors

from ....data import buffer_pool
from ....errors import ConfigError, DataError
from ....registry import TRANSFORMS
from ..transform_ops import MosaicCanvas, box_candidates, check_fill, fill_of, row_bands, to_uint8, uniform
from ..transforms import select_boxes
from .warp import warp_boxes, warp_image  # noqa: F401  (warp_image: its tests import it from here)


@TRANSFORMS.register("random_perspective_yolox")
class RandomPerspectiveYolox:
    """UP's ``random_perspective_yolox``: centre the image, rotate by U(-degrees, degrees) and
    scale by U(scale[0], scale[1]) (a single number s means [1 - s, 1 + s]), shear both axes by
    U(-shear, shear) degrees, tilt by U(-perspective, perspective), then move the centre to
    U(0.5 - translate, 0.5 + translate) of the output, which is the input grown by
    ``2 * border`` (h, w; UP's YOLOX files give [-320, -320] to turn a 1280 mosaic into 640).

    As in UP, a sample whose ``mosaic`` was skipped (mosaic_prob) passes unchanged; without a
    mosaic in the pipeline every sample is warped. Up to ``max_try`` warps are drawn until one
    keeps a box. (UP's YOLOX class leaves ``perspective`` out of its matrix; its files all set 0.)
    """

    def __init__(self, degrees: float = 0.0, translate: float = 0.1, scale: object = 0.5, shear: float = 0.0,
                 perspective: float = 0.0, fill_color: object = 0, border: list = (0, 0), max_try: int = 1,
                 clip_box: bool = True):
        if isinstance(scale, (int, float)) and not isinstance(scale, bool):
            scale = [1.0 - scale, 1.0 + scale]
        if not isinstance(scale, (list, tuple)) or len(scale) != 2 or not 0 < scale[0] <= scale[1]:
            raise ConfigError("scale", f"expected [min, max] with 0 < min <= max (or one number s), got {scale!r}")
        if not isinstance(border, (list, tuple)) or len(border) != 2 or \
                any(isinstance(b, bool) or not isinstance(b, int) for b in border):
            raise ConfigError("border", f"expected [h, w] integers, got {border!r}")
        if isinstance(max_try, bool) or not isinstance(max_try, int) or max_try < 1:
            raise ConfigError("max_try", f"expected a positive integer, got {max_try!r}")
        for name, value in (("degrees", degrees), ("translate", translate), ("shear", shear),
                            ("perspective", perspective)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(name, f"expected a number >= 0, got {value!r}")
        self.degrees, self.translate, self.scale = float(degrees), float(translate), [float(s) for s in scale]
        self.shear, self.perspective = float(shear), float(perspective)
        self.fill_color, self.border = check_fill(fill_color), [int(b) for b in border]
        self.max_try, self.clip_box = max_try, clip_box

    def matrix(self, h, w, out_h, out_w):
        """(3x3 float64 matrix, scale) drawn from torch's generator."""
        centre = torch.eye(3, dtype=torch.float64)
        centre[0, 2], centre[1, 2] = -w / 2, -h / 2
        tilt = torch.eye(3, dtype=torch.float64)
        tilt[2, 0] = uniform(-self.perspective, self.perspective)
        tilt[2, 1] = uniform(-self.perspective, self.perspective)
        angle, s = math.radians(uniform(-self.degrees, self.degrees)), uniform(*self.scale)
        rotate = torch.eye(3, dtype=torch.float64)
        # counter-clockwise on screen (y down), as OpenCV's rotation matrix turns it
        rotate[0, 0], rotate[0, 1] = s * math.cos(angle), s * math.sin(angle)
        rotate[1, 0], rotate[1, 1] = -s * math.sin(angle), s * math.cos(angle)
        shear = torch.eye(3, dtype=torch.float64)
        shear[0, 1] = math.tan(math.radians(uniform(-self.shear, self.shear)))
        shear[1, 0] = math.tan(math.radians(uniform(-self.shear, self.shear)))
        move = torch.eye(3, dtype=torch.float64)
        move[0, 2] = uniform(0.5 - self.translate, 0.5 + self.translate) * out_w
        move[1, 2] = uniform(0.5 - self.translate, 0.5 + self.translate) * out_h
        return move @ shear @ rotate @ tilt @ centre, s

    def __call__(self, image, target):
        mosaic = target.pop("_mosaic", True)
        if mosaic is False:
            return image, target
        c, h, w = image.shape
        out_h, out_w = h + 2 * self.border[0], w + 2 * self.border[1]
        if out_h < 1 or out_w < 1:
            raise DataError(f"random_perspective_yolox: border {self.border} leaves nothing of a {h}x{w} image "
                            "(UP's YOLOX border is minus half the mosaic's tar_size)")
        boxes = target["boxes"].as_subclass(torch.Tensor)
        for attempt in range(self.max_try):
            matrix, s = self.matrix(h, w, out_h, out_w)
            warped = warp_boxes(boxes, matrix)
            if self.clip_box:
                warped[:, 0::2] = warped[:, 0::2].clamp(0, out_w)
                warped[:, 1::2] = warped[:, 1::2].clamp(0, out_h)
            keep = box_candidates(boxes.to(torch.float64) * s, warped)
            if bool(keep.any()) or attempt == self.max_try - 1:
                break
        target = select_boxes(target, keep, warped, (out_h, out_w))
        if (out_h, out_w) != (h, w) or not torch.equal(matrix, torch.eye(3, dtype=torch.float64)):
            pixels = image.as_subclass(torch.Tensor)
            fill = fill_of(self.fill_color, c, dtype=pixels.dtype)
            # the mosaic canvas just built, unchanged, with this fill: the warp may skip its fill
            known = mosaic if isinstance(mosaic, MosaicCanvas) and mosaic.describes(image) and \
                mosaic.fill.dtype == fill.dtype and torch.equal(mosaic.fill, fill) else None
            image = tv_tensors.Image(warp_image(pixels, matrix.to(torch.float64), out_h, out_w, fill, known))
        return image, target

    def __repr__(self):
        return (f"RandomPerspectiveYolox(degrees={self.degrees}, translate={self.translate}, scale={self.scale}, "
                f"shear={self.shear}, border={self.border})")


@TRANSFORMS.register("random_perspective")
class RandomPerspective(RandomPerspectiveYolox):
    """UP's ``random_perspective`` (its YOLOv5 affine, also in the YOLOv6 ``_v6aug`` files), of
    which UP's YOLOX class is a subclass: the same warp with ``scale`` one number s (scale drawn
    from U(1 - s, 1 + s)) and the ``perspective`` tilt in the matrix."""

    def __init__(self, degrees: float = 0.0, translate: float = 0.1, scale: float = 0.5, shear: float = 0.0,
                 perspective: float = 0.0, fill_color: object = 0, border: list = (0, 0), max_try: int = 1,
                 clip_box: bool = True):
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 <= scale < 1:
            raise ConfigError("scale", f"expected one number s in [0, 1) (scale drawn from U(1 - s, 1 + s)), got "
                              f"{scale!r}", "a [min, max] range is random_perspective_yolox's")
        super().__init__(degrees, translate, scale, shear, perspective, fill_color, border, max_try, clip_box)


def rgb_to_hsv(image):
    """3xHxW RGB in [0, 1] -> (hue in [0, 1), saturation, value)."""
    r, g, b = image
    value = image.amax(0)
    delta = value - image.amin(0)
    safe = delta.clamp_min(1e-12)
    saturation = delta / value.clamp_min(1e-12)
    # the hue's sector offset (0, 2, 4 with red, green, blue largest) plus the position in it
    hue = torch.where(value == r, (g - b) / safe, torch.where(value == g, (b - r) / safe + 2.0, (r - g) / safe + 4.0))
    hue = hue.div_(6.0).remainder_(1.0).mul_(delta > 0)
    return hue, saturation, value


def hsv_to_rgb(hue, saturation, value):
    """The inverse of :func:`rgb_to_hsv` (channel n: v - v s clamp(min(k, 4 - k), 0, 1) with
    k = (n + 6 h) mod 6 for n = 5, 3, 1)."""
    k = (torch.tensor([5.0, 3.0, 1.0]).view(3, 1, 1) + hue * 6.0) % 6.0
    ramp = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
    return value - ramp.mul_(value * saturation)


# augment_hsv's bands: its int16 temporaries are half the size of float ones, so a third more
# pixels per band than BAND_PIXELS still stays in the cache (640 wide, one thread: 30,000 pixels
# 3.85 ms, 40,000 3.54, 45,000 3.40, 50,000 4.57: past the cache)
HSV_BAND_PIXELS = 40_000


def hsv_gains_uint8(image, gains, bgr=False):
    """:class:`AugmentHSV`'s arithmetic on a uint8 3xHxW image, rounded to uint8: the float
    path (:func:`rgb_to_hsv`, gains, :func:`hsv_to_rgb`) on 0-255 values, rewritten in whole-
    tensor arithmetic (no comparisons, ``where`` or ``remainder``, each as slow on the CPU as
    ten additions) and run band by band of rows.

    The result is laid out channels-last (a CxHxW view of HxWxC memory, as decoded images are):
    the resize that follows in UP's YOLOX pipelines (keep_ar_resize_max) runs twice as fast on
    that layout. Each band's channels are written one by one (a strided copy of a contiguous
    plane costs half of one copy across all three)."""
    c, h, w = image.shape
    out = buffer_pool.empty((h, w, c), torch.uint8).permute(2, 0, 1)
    for y0, y1 in row_bands(h, w, HSV_BAND_PIXELS):
        band = _hsv_gains_band(image[:, y0:y1], gains, bgr)
        for channel in range(c):
            out[channel, y0:y1].copy_(band[channel])
    return out


def _hsv_gains_band(image, gains, bgr):
    """Rows of :func:`hsv_gains_uint8`, rounded, as int16: with x = 6 hue, v and s after their
    gains, each channel is v - v s ramp(x), as in :func:`hsv_to_rgb`. The hue's sector and
    position are whole numbers until the division: computed in int16 (half the bytes of
    float32, twice the values per vector instruction), the same values, so the same bits."""
    rgb = image.to(torch.int16)
    r, g, b = rgb.unbind(0)
    if bgr:
        r, b = b, r
    value = torch.maximum(torch.maximum(r, g), b)
    delta = value - torch.minimum(torch.minimum(r, g), b)
    # 1 where the channel is the largest (red first, then green, on ties), else 0
    below = value - 1
    red = (r - below).clamp_(min=0)
    green = (g - below).clamp_(min=0).sub_(red).clamp_(min=0)
    blue = torch.rsub(red, 1).sub_(green)
    # 6 hue = the sector's start (0, 2, 4; 6 for red with blue above green) + the signed
    # position in it: in [0, 6); its numerator is at most 6 x 255, within int16
    g_minus_b = g - b
    start = torch.add(green, blue, alpha=2).sub_(g_minus_b.clamp(-1, 0).mul_(red), alpha=3)
    numerator = g_minus_b.mul_(red).addcmul_(b - r, green).addcmul_(r - g, blue).addcmul_(start, delta, value=2)
    x = numerator.to(torch.float32).div_(delta.clamp(min=1).to(torch.float32)).mul_(float(gains[0]))
    if gains[0] > 1.0:  # wrap around the hue circle
        x.sub_(x.div(6.0).floor_().mul_(6.0))
    value, delta = value.to(torch.float32), delta.to(torch.float32)
    new_value = (value * float(gains[2])).clamp_(max=255.0)
    # value x saturation after the gains; saturation = delta / value (0 for black: delta is 0)
    chroma = delta.mul_(float(gains[1])).div_(value.clamp_(min=1.0)).clamp_(max=1.0).mul_(new_value)
    # How far each channel sits below the value, as a share of the chroma (hsv_to_rgb's
    # trapezoids, written for x in [0, 6]): red 2 - |x - 3|, green |x - 2| - 1, blue |x - 4| - 1,
    # clamped to [0, 1]
    # (the signs are +-1, so the product is exact and the sum rounds once, as addcmul's would; an
    # addcmul with two broadcast 3x1x1 operands misses torch's vectorized loop: 3x slower)
    centres, signs, offsets = _RAMPS_BGR if bgr else _RAMPS_RGB
    ramps = (x[None] - centres).abs_().mul_(signs).add_(offsets).clamp_(0.0, 1.0)
    # + 0.5 and truncation: rounded half up (every value is >= 0)
    return torch.addcmul(new_value.add_(0.5), ramps, chroma, value=-1.0).to(torch.int16)


# (centres, signs, offsets) of the three ramps, per channel order
_RAMPS_RGB = tuple(torch.tensor(v).view(3, 1, 1) for v in ([3.0, 2.0, 4.0], [-1.0, 1.0, 1.0], [2.0, -1.0, -1.0]))
_RAMPS_BGR = tuple(t.flip(0) for t in _RAMPS_RGB)


@TRANSFORMS.register("augment_hsv")
class AugmentHSV:
    """UP's ``augment_hsv``: hue, saturation and value each multiplied by a gain drawn from
    U(1 - gain, 1 + gain) (hue wraps around; saturation and value are clipped to [0, 1]).
    ``color_mode`` is the channel order of the image, as in UP: an ``fs_opencv`` reader with
    color_mode BGR hands over BGR channels here too, and the hue is taken of the colour they
    describe. A 1-channel image gets the value gain only."""

    COLOR_MODES = ("RGB", "BGR")

    def __init__(self, hgain: float = 0.5, sgain: float = 0.5, vgain: float = 0.5, color_mode: str = "RGB"):
        if color_mode not in self.COLOR_MODES:
            raise ConfigError("color_mode", f"{color_mode!r} is not one of {', '.join(self.COLOR_MODES)}")
        for name, value in (("hgain", hgain), ("sgain", sgain), ("vgain", vgain)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(name, f"expected a number >= 0, got {value!r}")
        self.gains = torch.tensor([hgain, sgain, vgain], dtype=torch.float32)
        self.color_mode = color_mode

    def __call__(self, image, target=None):
        gains = (torch.rand(3) * 2.0 - 1.0) * self.gains + 1.0
        pixels = image.as_subclass(torch.Tensor)
        if pixels.dtype == torch.uint8:
            out = to_uint8(pixels * gains[2]) if pixels.shape[0] == 1 else \
                hsv_gains_uint8(pixels, gains, self.color_mode == "BGR")
        elif pixels.shape[0] == 1:
            out = (pixels * gains[2]).clamp(0.0, 1.0)
        else:
            bgr = self.color_mode == "BGR"
            hue, saturation, value = rgb_to_hsv(pixels.flip(0) if bgr else pixels)
            out = hsv_to_rgb(hue.mul_(gains[0]).remainder_(1.0), saturation.mul_(gains[1]).clamp_(0.0, 1.0),
                             value.mul_(gains[2]).clamp_(0.0, 1.0))
            out = out.flip(0) if bgr else out
        out = tv_tensors.Image(out) if isinstance(image, tv_tensors.Image) else out
        return out if target is None else (out, target)

    def __repr__(self):
        return f"AugmentHSV(hgain={self.gains[0]:g}, sgain={self.gains[1]:g}, vgain={self.gains[2]:g})"


@TRANSFORMS.register("custom_to_tensor")
class CustomToTensor:
    """UP's ``custom_to_tensor`` {norm_image}: UP turns an OpenCV image into a float tensor of
    0-255 values (divided by 255 with norm_image: true). The YOLOX model here multiplies its
    input by 255 itself (``pixel_scale``), so the default hands the model pixels in [0, 1] (UP's
    0-255 values once scaled) and norm_image: true divides those by 255 more (UP's 0-1 values).

    It is the pipeline's final conversion: at the end of a pipeline it is folded into the
    model-input step (:meth:`fold_model_input`); called on an image it converts the same way,
    a uint8 image to float."""

    def __init__(self, norm_image: bool = False):
        self.norm_image = bool(norm_image)

    def fold_model_input(self, model_input):
        """``model_input`` followed by this step (see :func:`up_trainer.data.model_input.split_model_input`)."""
        return model_input.then_divide(255.0) if self.norm_image else model_input

    def __call__(self, image, target=None):
        from ....data.model_input import ModelInput

        pixels = image.as_subclass(torch.Tensor)
        if pixels.dtype == torch.uint8 or self.norm_image:
            pixels = self.fold_model_input(ModelInput())(pixels)
            image = tv_tensors.Image(pixels) if isinstance(image, tv_tensors.Image) else pixels
        return image if target is None else (image, target)

    def __repr__(self):
        return f"CustomToTensor(norm_image={self.norm_image})"
