"""Pixel and box helpers the detection transforms share (YOLOX's single-image ones, the
mixing ones, UP's improve augmentations): UP's 0-255 fill colours on uint8 or float images,
rounding to uint8, cache-sized row bands, one uniform draw, YOLOv5's box survival rule, and
what mosaic tells the warp after it about the canvas it built."""
from typing import NamedTuple

import torch

from ...errors import ConfigError, DataError


def fill_of(fill_color, channels, path="fill_color", dtype=torch.float32):
    """UP's fill colour (a 0-255 number, or one per channel) as a Cx1x1 tensor of ``dtype``: in
    [0, 1] for a float dtype, the nearest level for uint8."""
    values = fill_color if isinstance(fill_color, (list, tuple)) else [fill_color] * channels
    if len(values) != channels:
        raise DataError(f"{path}: {len(values)} values for a {channels}-channel image")
    if dtype == torch.uint8:
        return torch.tensor([round(float(v)) for v in values], dtype=torch.uint8).view(channels, 1, 1)
    return torch.tensor([float(v) / 255.0 for v in values], dtype=dtype).view(channels, 1, 1)


def to_uint8(pixels):
    """Float pixels on the 0-255 scale rounded to the nearest uint8 level (in place; through
    int16, which converts several times faster than float -> uint8 directly)."""
    return pixels.round_().clamp_(0.0, 255.0).to(torch.int16).to(torch.uint8)


# Row bands of about this many pixels keep an element-wise computation's temporaries in the CPU
# cache (a whole 640 x 640 image at a time runs three to four times slower, bound by memory), and
# each float temporary under 128 KiB, glibc's default mmap threshold: larger ones are mapped and
# page-faulted in afresh on every allocation.
BAND_PIXELS = 30_000


def row_bands(height, width, pixels=None):
    """(start, stop) row ranges of about ``pixels`` (default BAND_PIXELS) pixels covering
    ``height`` rows."""
    rows = max(1, (pixels or BAND_PIXELS) // max(width, 1))
    return [(y, min(y + rows, height)) for y in range(0, height, rows)]


def check_fill(fill_color, path="fill_color"):
    values = fill_color if isinstance(fill_color, (list, tuple)) else [fill_color]
    if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 255 for v in values):
        raise ConfigError(path, f"expected a pixel value 0..255 or one per channel, got {fill_color!r}")
    return list(fill_color) if isinstance(fill_color, (list, tuple)) else fill_color


def uniform(lo, hi):
    """One number uniform in [lo, hi) from torch's global generator."""
    return lo + (hi - lo) * float(torch.rand((), dtype=torch.float64))


def box_candidates(before, after, wh_thr=2.0, ar_thr=20.0, area_thr=0.2):
    """YOLOv5's rule for boxes that survive an augmentation (``before`` scaled to the new image,
    ``after`` clipped): both sides longer than wh_thr pixels, at least area_thr of the area
    kept, aspect ratio below ar_thr."""
    w1, h1 = before[:, 2] - before[:, 0], before[:, 3] - before[:, 1]
    w2, h2 = after[:, 2] - after[:, 0], after[:, 3] - after[:, 1]
    aspect = torch.maximum(w2 / (h2 + 1e-16), h2 / (w2 + 1e-16))
    return (w2 > wh_thr) & (h2 > wh_thr) & (w2 * h2 / (w1 * h1 + 1e-16) > area_thr) & (aspect < ar_thr)


class MosaicCanvas(NamedTuple):
    """A mosaic canvas as mosaic returned it (``target["_mosaic"]``): the image object, its
    version counter then, the rectangles (x1, y1, x2, y2) that hold pictures and the fill
    (Cx1x1, the canvas's dtype) everywhere else. The warp that follows skips sampling parts it
    knows are fill (a third of a 2x canvas); the knowledge holds only for that very object,
    unchanged since (:meth:`describes`)."""

    image: torch.Tensor
    version: int
    pictures: tuple
    fill: torch.Tensor

    def describes(self, image):
        return image is self.image and image._version == self.version

    def reads_only_fill(self, rect):
        """Whether the pixels of ``rect`` (x1, y1, x2, y2) are all fill."""
        x1, y1, x2, y2 = rect
        return not any(x1 < px2 and px1 < x2 and y1 < py2 and py1 < y2 for px1, py1, px2, py2 in self.pictures)
