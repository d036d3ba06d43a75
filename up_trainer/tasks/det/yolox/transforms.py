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
import torch.nn.functional as F
from torchvision import tv_tensors

from ....data import buffer_pool
from ....errors import ConfigError, DataError
from ....registry import TRANSFORMS
from ..transform_ops import BAND_PIXELS, box_candidates, check_fill, fill_of, row_bands, to_uint8, uniform
from ..transforms import select_boxes


def warp_image(image, matrix, out_h, out_w, fill):
    """``image`` (CxHxW, uint8 or float) under the 3x3 ``matrix`` (source -> output, continuous
    pixel coordinates: pixel (i, j) covers [j, j+1) x [i, i+1)), bilinear, ``fill`` (Cx1x1 of
    the image's dtype) outside. Sampling runs in float on a copy of just the part of the image
    the output reads, over just the part of the output the image lands on (an affine map keeps
    both inside the image of the corners), band by band of output rows (each band's grid and
    samples stay in the CPU cache); a uint8 result is rounded to the nearest level. A uint8
    image under an affine map that shrinks it goes tile by tile instead
    (:func:`_warp_uint8_tiles`)."""
    c, h, w = image.shape
    inverse = torch.linalg.inv(matrix)
    affine = bool(inverse[2, 0] == 0.0) and bool(inverse[2, 1] == 0.0)
    if affine and image.dtype == torch.uint8 and _spread(inverse) > 0.8:  # it shrinks the image
        return _warp_uint8_tiles(image, matrix, inverse, out_h, out_w, fill)
    # bilinear sampling blends the pixels within one of the point: one pixel of margin, in the
    # image's units, on both sides
    left, top, right, bottom = _around(inverse, (0, 0, out_w, out_h), 1, (w, h)) if affine else (0, 0, w, h)
    x0, y0, x1, y1 = _around(matrix, (-1, -1, w + 1, h + 1), 0, (out_w, out_h)) if affine else (0, 0, out_w, out_h)
    if right <= left or bottom <= top or x1 <= x0 or y1 <= y0:  # the image lands outside the output
        return fill.expand(c, out_h, out_w).clone()
    cw, ch = right - left, bottom - top
    # Output pixel centres mapped back into grid_sample's grid over the part read (align_corners
    # False: -1 and 1 are its outer edges), the normalisation folded into the inverse.
    normalise = torch.tensor([[2.0 / cw, 0.0, -1.0 - 2.0 * left / cw], [0.0, 2.0 / ch, -1.0 - 2.0 * top / ch],
                              [0.0, 0.0, 1.0]], dtype=torch.float64)
    coefficients = (normalise @ inverse).tolist()
    dtype = image.dtype if image.is_floating_point() else torch.float32
    # in the image's own memory layout: converting a channels-last canvas to a CxHxW copy costs
    # more than grid_sample loses reading channels-last
    part = image[:, top:bottom, left:right]
    # a reused buffer (data/buffer_pool.py): up to 20 MB of fresh pages per sample cost more
    # than the conversion itself
    pixels = buffer_pool.empty_like(part, dtype).copy_(part) if image.dtype != dtype else part
    shift = fill.to(dtype)
    blank = not bool(shift.any())
    if not blank:  # zeros padding then lands exactly on the fill colour
        pixels = pixels.sub_(shift) if image.dtype != dtype else pixels - shift  # never the caller's pixels
    covered = (x0, y0, x1, y1) == (0, 0, out_w, out_h)
    out = buffer_pool.empty((c, out_h, out_w), image.dtype)
    if not covered:
        out.copy_(fill.expand(c, out_h, out_w))
    xs = torch.arange(x0, x1, dtype=dtype).add_(0.5)[None, :]
    for b0, b1 in row_bands(y1 - y0, x1 - x0):
        ys = torch.arange(y0 + b0, y0 + b1, dtype=dtype).add_(0.5)[:, None]
        grid = _sampling_grid(coefficients, xs, ys, affine)
        band = F.grid_sample(pixels[None], grid[None], mode="bilinear", padding_mode="zeros", align_corners=False)[0]
        if not blank:
            band.add_(shift)
        # bilinear weights are convex: uint8 values lie in [0, 255], so + 0.5 and truncation round them
        out[:, y0 + b0:y0 + b1, x0:x1] = band if image.is_floating_point() else band.add_(0.5).to(torch.int16)
    return out


# Source pixels (float, channels last: 12 bytes each) a tile of the uint8 warp reads at most:
# 1.2 MB, about what a core's L2 cache holds, so grid_sample's gathers find the tile's float copy
# there (measured on the 1280 x 1280 mosaics of YOLOX: 60,000 - 250,000 all within 10 % of the
# best; 40,000 and below lose to the per-tile overhead)
TILE_SOURCE_PIXELS = 100_000
# Output pixels of a tile at most (the element-wise steps' band size)
TILE_OUTPUT_PIXELS = BAND_PIXELS


def _warp_uint8_tiles(image, matrix, inverse, out_h, out_w, fill):
    """:func:`warp_image` of a uint8 image under an affine ``matrix``, tile by tile of the
    output. Each tile converts to float only the part of the image it reads (the image of its
    corners, one pixel of margin) into a reused buffer, then samples it: grid_sample gathers
    from a copy in the CPU's cache instead of a float image of the whole part (a 1280 x 1280
    mosaic is 20 MB as float: shrunk to half its size or less by the warp, the whole-part
    sampling took 9 - 11 ms, tiled 4 - 6). Same sampling as the float path (the same bilinear
    taps, zeros beyond the image shifted onto the fill), rounded once; the grid is computed in
    float64, so the result is nearer the exact warp than the float path's float32 grid."""
    c, h, w = image.shape
    x0, y0, x1, y1 = _around(matrix, (-1, -1, w + 1, h + 1), 0, (out_w, out_h))
    out = buffer_pool.empty((c, out_h, out_w), torch.uint8)
    if (x0, y0, x1, y1) != (0, 0, out_w, out_h):
        out.copy_(fill.expand(c, out_h, out_w))
    if x1 <= x0 or y1 <= y0:  # the image lands outside the output
        return out
    inverse_rows = inverse.tolist()
    side = max(16, int(math.sqrt(min(TILE_SOURCE_PIXELS / _spread(inverse), TILE_OUTPUT_PIXELS))))
    tile_h, tile_w = min(side, y1 - y0), min(side, x1 - x0)
    if tile_w < side:  # a narrow output: taller tiles of the same area
        tile_h = min(y1 - y0, max(tile_h, TILE_OUTPUT_PIXELS // tile_w, 1))
    rects = [(tx, ty, min(tx + tile_w, x1), min(ty + tile_h, y1))
             for ty in range(y0, y1, tile_h) for tx in range(x0, x1, tile_w)]
    reads = [_around_rows(inverse_rows, rect, 1, (w, h)) for rect in rects]
    largest = max((r - l) * (bo - t) for l, t, r, bo in reads)
    if largest <= 0:
        return out
    source = buffer_pool.empty((largest * c,), torch.float32)
    shift = fill.to(torch.float32)
    blank = not bool(shift.any())
    (a, b, c0), (d, e, f0), (_, _, m) = inverse_rows
    a, b, c0, d, e, f0 = a / m, b / m, c0 / m, d / m, e / m, f0 / m
    # The grid in float64 (as fast here as float32), then float32: float32 arithmetic on these
    # coordinates is off by up to 1e-4 of a pixel, a few hundredths of a level at a sharp edge
    columns = torch.arange(tile_w, dtype=torch.float64)[None, :]
    rows = torch.arange(tile_h, dtype=torch.float64)[:, None]
    for (tx, ty, tx1, ty1), (left, top, right, bottom) in zip(rects, reads):
        cw, ch = right - left, bottom - top
        if cw <= 0 or ch <= 0:  # this tile of the output sees none of the image: the fill
            continue
        pixels = source[:ch * cw * c].view(ch, cw, c).permute(2, 0, 1).copy_(image[:, top:bottom, left:right])
        if not blank:  # zeros padding then lands exactly on the fill colour
            pixels.sub_(shift)
        # grid_sample's coordinates (align_corners false: -1 and 1 are the outer edges of the
        # part read) of the source point of output pixel (tx + 0.5 + i, ty + 0.5 + j)
        x0, y0 = tx + 0.5, ty + 0.5
        coefficients = [[2.0 * a / cw, 2.0 * b / cw, 2.0 * (a * x0 + b * y0 + c0 - left) / cw - 1.0],
                        [2.0 * d / ch, 2.0 * e / ch, 2.0 * (d * x0 + e * y0 + f0 - top) / ch - 1.0], [0.0, 0.0, 1.0]]
        grid = _sampling_grid(coefficients, columns[:, :tx1 - tx], rows[:ty1 - ty], True).to(torch.float32)
        samples = F.grid_sample(pixels[None], grid[None], mode="bilinear", padding_mode="zeros",
                                align_corners=False)[0]
        if not blank:
            samples.add_(shift)
        # bilinear weights are convex: the values lie in [0, 255], so + 0.5 and truncation round them
        out[:, ty:ty1, tx:tx1] = samples.add_(0.5).to(torch.int16)
    return out


def _spread(inverse):
    """Source pixels an output pixel of the affine warp with this ``inverse`` spans (the box
    around its image): a tile of s x s output pixels reads about s^2 times as many."""
    (a, b, _), (d, e, _) = inverse[:2].tolist()
    return max((abs(a) + abs(b)) * (abs(d) + abs(e)), 1e-12)


def _around_rows(matrix, rect, margin, limits):
    """:func:`_around` with ``matrix`` as nested lists (no tensor work: it runs once per tile)."""
    x0, y0, x1, y1 = rect
    (a, b, c), (d, e, f), _ = matrix
    xs = [a * x + b * y + c for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1))]
    ys = [d * x + e * y + f for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1))]
    w, h = limits
    return (min(max(math.floor(min(xs)) - margin, 0), w), min(max(math.floor(min(ys)) - margin, 0), h),
            min(max(math.ceil(max(xs)) + margin, 0), w), min(max(math.ceil(max(ys)) + margin, 0), h))


def _around(matrix, rect, margin, limits):
    """(left, top, right, bottom) in whole pixels around the image of ``rect`` (x0, y0, x1, y1)
    under the affine 3x3 ``matrix``, widened by ``margin`` and clipped to [0, limits (w, h)]."""
    x0, y0, x1, y1 = rect
    corners = torch.tensor([[x0, y0, 1.0], [x1, y0, 1.0], [x0, y1, 1.0], [x1, y1, 1.0]],
                           dtype=torch.float64) @ matrix.T
    (lx, ly), (hx, hy) = corners[:, :2].amin(0).tolist(), corners[:, :2].amax(0).tolist()
    w, h = limits
    return (min(max(math.floor(lx) - margin, 0), w), min(max(math.floor(ly) - margin, 0), h),
            min(max(math.ceil(hx) + margin, 0), w), min(max(math.ceil(hy) + margin, 0), h))


def _sampling_grid(coefficients, xs, ys, affine):
    """grid_sample's grid (rows x columns x 2) of the output pixel centres ``xs`` (1 x W) and
    ``ys`` (H x 1) under the 3x3 ``coefficients``."""
    (a, b, c), (d, e, f), (g, k, m) = coefficients
    grid = torch.empty(ys.shape[0], xs.shape[1], 2, dtype=xs.dtype)
    if affine:  # one broadcast sum per coordinate
        torch.add(xs * (a / m), ys * (b / m) + c / m, out=grid[..., 0])
        torch.add(xs * (d / m), ys * (e / m) + f / m, out=grid[..., 1])
    else:  # projective: divide by the third coordinate
        third = g * xs + k * ys + m
        torch.div(a * xs + b * ys + c, third, out=grid[..., 0])
        torch.div(d * xs + e * ys + f, third, out=grid[..., 1])
    return grid


def warp_boxes(boxes, matrix):
    """The axis-aligned boxes around each box's 4 corners under ``matrix``."""
    n = len(boxes)
    corners = boxes[:, [0, 1, 2, 3, 0, 3, 2, 1]].reshape(n * 4, 2).to(torch.float64)
    points = torch.cat([corners, torch.ones(n * 4, 1, dtype=torch.float64)], 1) @ matrix.T
    points = (points[:, :2] / points[:, 2:3]).reshape(n, 4, 2)
    return torch.cat([points.min(1).values, points.max(1).values], 1)


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
        if target.pop("_mosaic", True) is False:
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
            image = tv_tensors.Image(warp_image(pixels, matrix.to(torch.float64), out_h, out_w, fill))
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
    centres, signs, offsets = _RAMPS_BGR if bgr else _RAMPS_RGB
    ramps = torch.addcmul(offsets, (x[None] - centres).abs_(), signs).clamp_(0.0, 1.0)
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
