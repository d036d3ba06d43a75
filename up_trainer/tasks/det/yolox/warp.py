"""The bilinear image warp of UP's YOLOX ``random_perspective`` transforms on CxHxW tensors,
uint8 or float [0, 1], and the boxes that follow it (split from :mod:`.transforms`: the warp is
most of that module's arithmetic, and its speed on uint8 is measured in docs/input_pipeline.rst).
"""
import math

import torch
import torch.nn.functional as F

from ....data import buffer_pool
from ..transform_ops import BAND_PIXELS, row_bands

def warp_image(image, matrix, out_h, out_w, fill, canvas=None):
    """``image`` (CxHxW, uint8 or float) under the 3x3 ``matrix`` (source -> output, continuous
    pixel coordinates: pixel (i, j) covers [j, j+1) x [i, i+1)), bilinear, ``fill`` (Cx1x1 of
    the image's dtype) outside. Sampling runs in float on a copy of just the part of the image
    the output reads, over just the part of the output the image lands on (an affine map keeps
    both inside the image of the corners), band by band of output rows (each band's grid and
    samples stay in the CPU cache); a uint8 result is rounded to the nearest level. A uint8
    image under an affine map that shrinks it goes tile by tile instead
    (:func:`_warp_uint8_tiles`). With ``canvas`` (a :class:`..transform_ops.MosaicCanvas` of
    ``image`` with this fill), output bands or tiles that read only its fill get the fill
    without sampling: sampling pixels that are all the fill gives exactly the fill."""
    c, h, w = image.shape
    inverse = torch.linalg.inv(matrix)
    affine = bool(inverse[2, 0] == 0.0) and bool(inverse[2, 1] == 0.0)
    if affine and image.dtype == torch.uint8 and _spread(inverse) > 0.8:  # it shrinks the image
        return _warp_uint8_tiles(image, matrix, inverse, out_h, out_w, fill, canvas)
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
    inverse_rows = inverse.tolist()
    for b0, b1 in row_bands(y1 - y0, x1 - x0):
        # every bilinear tap of the band lies within one pixel of the image of its corners (two
        # here, for the float32 grid's rounding)
        if canvas is not None and affine and canvas.reads_only_fill(
                _around_rows(inverse_rows, (x0, y0 + b0, x1, y0 + b1), 2, (w, h))):
            if covered:  # (else the whole output was filled above)
                out[:, y0 + b0:y0 + b1, x0:x1] = fill
            continue
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


def _warp_uint8_tiles(image, matrix, inverse, out_h, out_w, fill, canvas=None):
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
    filled = (x0, y0, x1, y1) != (0, 0, out_w, out_h)
    if filled:
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
        return out if filled else out.copy_(fill.expand(c, out_h, out_w))
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
        # this tile of the output sees none of the image, or only fill of a mosaic canvas: the fill
        if cw <= 0 or ch <= 0 or (canvas is not None and canvas.reads_only_fill((left, top, right, bottom))):
            if not filled:  # (a corner of a turned image's box: the reused buffer holds old pixels)
                out[:, ty:ty1, tx:tx1] = fill
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
