"""UP's OneNet augmentation ``range_crop`` {crop_size: [lo, hi], scales, max_size, crop_prob}.

With probability ``crop_prob`` (else the sample passes unchanged): a ``keep_ar_resize`` to one
of ``scales`` (short side, long side capped at ``max_size``), then a window of width and height
each drawn uniformly in [min(side, lo), min(side, hi)] (integers, both ends included) at a
uniform position. Boxes overlapping the window are kept, clipped to it (UP: any overlap, not the
centre rule of ``crop``); the others leave with their labels.
"""
import sys

import torch

from ....errors import ConfigError
from ....registry import TRANSFORMS
from ..improve_transforms import _coin, _new_canvas, _probability
from ..transforms import KeepRatioResizeUP


def _inclusive(lo, hi):
    return int(torch.randint(lo, hi + 1, ()))


@TRANSFORMS.register("range_crop")
class RangeCrop:
    def __init__(self, crop_size: list, scales: list, max_size: int = sys.maxsize, crop_prob: float = 0.5):
        if not isinstance(crop_size, (list, tuple)) or len(crop_size) != 2 or \
                any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in crop_size) \
                or crop_size[0] > crop_size[1]:
            raise ConfigError("crop_size", f"expected [lo, hi] positive integers with lo <= hi, got {crop_size!r}")
        self.crop_size, self.crop_prob = list(crop_size), _probability(crop_prob, "crop_prob")
        self.resize = KeepRatioResizeUP(scales, min(max_size, 1 << 30))

    def __call__(self, image, target):
        if not _coin(self.crop_prob):
            return image, target
        image, target = self.resize(image, target)
        _, h, w = image.shape
        lo, hi = self.crop_size
        cw, ch = _inclusive(min(w, lo), min(w, hi)), _inclusive(min(h, lo), min(h, hi))
        x1, y1 = _inclusive(0, w - cw), _inclusive(0, h - ch)
        x2, y2 = x1 + cw, y1 + ch
        boxes = target["boxes"].as_subclass(torch.Tensor)
        keep = (boxes[:, 0] < x2) & (boxes[:, 1] < y2) & (boxes[:, 2] > x1) & (boxes[:, 3] > y1)
        low = torch.tensor([x1, y1, x1, y1], dtype=boxes.dtype)
        high = torch.tensor([x2, y2, x2, y2], dtype=boxes.dtype)
        moved = torch.minimum(torch.maximum(boxes, low), high) - low
        pixels = image.as_subclass(torch.Tensor)[:, y1:y2, x1:x2]
        return _new_canvas(image, target, pixels, keep, moved, ch, cw)

    def __repr__(self):
        return f"RangeCrop(crop_size={self.crop_size}, scales={self.resize.scales}, crop_prob={self.crop_prob})"
