"""``digits_det``: scenes of scikit-learn's handwritten digits, generated on the fly,
deterministic by seed (samples as every detection dataset's, see datasets.py)."""
from typing import Optional

import numpy as np
import torch

from ...errors import ConfigError
from ...registry import DATASETS
from .datasets import DetDataset

# -- digits_det --------------------------------------------------------------------------------
_DIGITS = None


def digit_pool():
    """(images float 1797x8x8 in [0, 1], labels) of scikit-learn's bundled digits, cached."""
    global _DIGITS
    if _DIGITS is None:
        from sklearn.datasets import load_digits

        d = load_digits()
        _DIGITS = (d.images.astype(np.float32) / 16.0, d.target.astype(np.int64))
    return _DIGITS


SPLITS = ("train", "val")  # val scenes draw from every 5th source digit, train from the rest


def render_scene(rng, pool_idx, canvas_size, digits_per_image, scale_range, noise, min_gap=1):
    """One scene: (HxW float image, boxes list, labels list), all drawn from ``rng``."""
    import torch.nn.functional as F

    images, labels = digit_pool()
    canvas = np.zeros((canvas_size, canvas_size), dtype=np.float32)
    boxes, labs = [], []
    k = int(rng.integers(digits_per_image[0], digits_per_image[1] + 1))
    for _ in range(k):
        src = int(pool_idx[rng.integers(len(pool_idx))])
        size = int(rng.integers(scale_range[0], scale_range[1] + 1))
        digit = images[src]
        # The tight box of the ink, scaled: multiples of size/8 are exact in binary floats, so a
        # COCO export (x, y, w, h) converts back to exactly the same xyxy box.
        rows, cols = np.nonzero(digit > 0)
        rel = [cols.min() * size / 8, rows.min() * size / 8, (cols.max() + 1) * size / 8, (rows.max() + 1) * size / 8]
        for _try in range(20):  # rejection sampling keeps digits from overlapping
            x0 = int(rng.integers(0, canvas_size - size + 1))
            y0 = int(rng.integers(0, canvas_size - size + 1))
            box = [x0 + rel[0], y0 + rel[1], x0 + rel[2], y0 + rel[3]]
            if all(box[0] >= b[2] + min_gap or b[0] >= box[2] + min_gap or box[1] >= b[3] + min_gap
                   or b[1] >= box[3] + min_gap for b in boxes):
                break
        else:
            continue
        patch = F.interpolate(torch.from_numpy(digit)[None, None], size=(size, size), mode="bilinear",
                              align_corners=False)[0, 0].numpy()
        region = canvas[y0:y0 + size, x0:x0 + size]
        np.maximum(region, patch, out=region)
        boxes.append(box)
        labs.append(int(labels[src]) + 1)
    if noise > 0:
        canvas = np.clip(canvas + rng.normal(0.0, noise, canvas.shape).astype(np.float32), 0.0, 1.0)
    return canvas, boxes, labs


@DATASETS.register("digits_det")
class DigitsDetection(DetDataset):
    """Scenes of scikit-learn's real handwritten digits on a square canvas, labels 1..10 for
    digits 0..9. Deterministic by (seed, split, index). The train and val splits draw digits
    from disjoint halves of the 1797 source digits (every 5th digit is val), so val measures
    generalisation to unseen handwriting."""

    generates_samples = True  # records hold no labels: nothing on disk for a data check to read

    def __init__(self, split: str = "train", num_images: int = 1000, canvas_size: int = 64,
                 digits_per_image: list = (1, 4), scale_range: list = (12, 24), noise: float = 0.05,
                 seed: int = 0, channels: int = 3, transforms: Optional[list] = None,
                 on_bad_record: str = "error"):
        if split not in SPLITS or num_images < 1:
            raise ConfigError("split" if split not in SPLITS else "num_images",
                              f"split must be one of {', '.join(SPLITS)} and num_images >= 1")
        if len(digits_per_image) != 2 or not 0 <= digits_per_image[0] <= digits_per_image[1] or digits_per_image[1] < 1:
            raise ConfigError("digits_per_image", f"expected [min, max] with 0 <= min <= max and max >= 1 (scenes with "
                              f"no digit at all teach a detector nothing), got {digits_per_image}")
        if len(scale_range) != 2 or not 4 <= scale_range[0] <= scale_range[1] <= canvas_size:
            raise ConfigError("scale_range", f"expected [min, max] digit sizes in pixels with 4 <= min <= max <= "
                              f"canvas_size ({canvas_size}), got {scale_range}")
        if channels not in (1, 3) or noise < 0:
            raise ConfigError("channels" if channels not in (1, 3) else "noise",
                              f"channels must be 1 or 3 (got {channels}), noise >= 0 (got {noise})")
        super().__init__(transforms, on_bad_record, [str(d) for d in range(10)])
        self.split, self.seed, self.channels = split, seed, channels
        self.canvas_size, self.noise = canvas_size, float(noise)
        self.digits_per_image = (int(digits_per_image[0]), int(digits_per_image[1]))
        self.scale_range = (int(scale_range[0]), int(scale_range[1]))
        n = len(digit_pool()[1])
        is_val = np.arange(n) % 5 == 0
        self.pool = np.nonzero(is_val if split == "val" else ~is_val)[0]
        self.records = [{"image_id": i + 1, "height": canvas_size, "width": canvas_size,
                         "source": f"digits_det {split} scene {i}"} for i in range(num_images)]

    def scene(self, index):
        rng = np.random.default_rng([self.seed, SPLITS.index(self.split), index])
        return render_scene(rng, self.pool, self.canvas_size, self.digits_per_image, self.scale_range, self.noise)

    def load(self, record):
        canvas, boxes, labels = self.scene(record["image_id"] - 1)  # rendered once per sample
        image = torch.from_numpy(canvas)[None].repeat(self.channels, 1, 1)
        return image, self.target_of(dict(record, boxes=boxes, labels=labels))
