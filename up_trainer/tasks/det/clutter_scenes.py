"""A small-data detection regime built from scikit-learn's digits: cluttered scenes on a large
canvas, written as a COCO data set (``export_clutter_coco``), so that every detection recipe
reads the same files (``coco`` dataset) and is measured the same way (benchmarks/det_recipes.py).

What makes it like a few hundred real photos rather than like the 64-px digits demo:

* a large canvas (default 288 px) with objects from about 8 to 120 px, sizes drawn
  log-uniformly (small objects are the common case, as in photos);
* a few classes (``num_classes`` digits 0..n-1 are labelled) and clutter that looks like them:
  whole digits of the unlabelled classes and magnified fragments of any digit, at lower
  contrast, plus a smooth background gradient and pixel noise;
* objects that overlap (ink boxes up to ``max_overlap`` IoU with each other);
* few images (the default split is 300 train, 75 val).

Deterministic by (seed, split, index); val draws its digits (objects and clutter) from the
handwriting train never shows (every 5th source digit, as ``digits_det``).
"""
import numpy as np
import torch
import torch.nn.functional as F
from torchvision.ops import box_iou

from ...errors import ConfigError
from .digits_det import SPLITS, digit_pool


def _resize(patch, h, w):
    return F.interpolate(torch.from_numpy(np.ascontiguousarray(patch))[None, None], size=(h, w),
                         mode="bilinear", align_corners=False)[0, 0].numpy()


def _paste(canvas, patch, x0, y0):
    """np.maximum of ``patch`` into ``canvas`` at (x0, y0), cut at the canvas edges."""
    h, w = patch.shape
    H, W = canvas.shape
    xa, ya, xb, yb = max(x0, 0), max(y0, 0), min(x0 + w, W), min(y0 + h, H)
    if xa >= xb or ya >= yb:
        return
    region = canvas[ya:yb, xa:xb]
    np.maximum(region, patch[ya - y0:yb - y0, xa - x0:xb - x0], out=region)


class ClutterScenes:
    """The scenes of one split: ``records`` / ``classes`` / ``scene(index)`` as ``digits_det``
    has them (export.write_split writes either)."""

    def __init__(self, split="train", num_images=300, canvas_size=288, num_classes=4, objects_per_image=(2, 8),
                 object_size=(8, 120), max_overlap=0.3, clutter=(4, 12), noise=0.06, seed=0):
        if split not in SPLITS or num_images < 1:
            raise ConfigError("split", f"split must be one of {', '.join(SPLITS)} and num_images >= 1")
        if not 1 <= num_classes <= 9:  # at least one digit class stays unlabelled, for clutter
            raise ConfigError("num_classes", f"expected 1..9 labelled digit classes, got {num_classes}")
        if not 4 <= object_size[0] <= object_size[1] <= canvas_size:
            raise ConfigError("object_size", f"expected [min, max] with 4 <= min <= max <= {canvas_size}")
        self.split, self.seed, self.canvas_size = split, seed, canvas_size
        self.num_classes, self.objects_per_image = num_classes, tuple(objects_per_image)
        self.object_size, self.max_overlap = tuple(object_size), float(max_overlap)
        self.clutter, self.noise = tuple(clutter), float(noise)
        self.classes = [str(d) for d in range(num_classes)]
        images, labels = digit_pool()
        is_val = np.arange(len(labels)) % 5 == 0
        pool = np.nonzero(is_val if split == "val" else ~is_val)[0]
        self.objects = pool[labels[pool] < num_classes]
        self.distractors = pool[labels[pool] >= num_classes]
        self.all_digits = pool
        self.records = [{"image_id": i + 1, "height": canvas_size, "width": canvas_size,
                         "source": f"clutter scenes {split} {i}"} for i in range(num_images)]

    def background(self, rng):
        """Gradient + clutter: unlabelled digits and magnified fragments of any digit, dimmer."""
        images, _ = digit_pool()
        s = self.canvas_size
        yy, xx = np.mgrid[0:s, 0:s].astype(np.float32) / s
        gx, gy, base = rng.uniform(-0.15, 0.15), rng.uniform(-0.15, 0.15), rng.uniform(0.0, 0.2)
        canvas = np.clip(base + gx * xx + gy * yy, 0.0, 1.0).astype(np.float32)
        for _ in range(int(rng.integers(self.clutter[0], self.clutter[1] + 1))):
            if rng.random() < 0.4 and len(self.distractors):  # a whole digit of an unlabelled class
                digit = images[int(self.distractors[rng.integers(len(self.distractors))])]
                size = int(np.exp(rng.uniform(np.log(self.object_size[0]), np.log(self.object_size[1]))))
                patch = _resize(digit, size, size) * rng.uniform(0.5, 0.9)
            else:  # a fragment (3-5 source pixels square) of any digit, magnified into a texture
                digit = images[int(self.all_digits[rng.integers(len(self.all_digits))])]
                k = int(rng.integers(3, 6))
                r0, c0 = int(rng.integers(0, 9 - k)), int(rng.integers(0, 9 - k))
                size = int(rng.integers(24, 100))
                patch = _resize(digit[r0:r0 + k, c0:c0 + k], size, size) * rng.uniform(0.25, 0.6)
            _paste(canvas, patch, int(rng.integers(-size // 2, s - size // 2)),
                   int(rng.integers(-size // 2, s - size // 2)))
        return canvas

    def scene(self, index):
        """(HxW float image in [0, 1], boxes xyxy, labels 1..num_classes)."""
        rng = np.random.default_rng([self.seed, SPLITS.index(self.split), index, 7])
        images, labels = digit_pool()
        canvas = self.background(rng)
        boxes, labs = [], []
        lo, hi = np.log(self.object_size[0]), np.log(self.object_size[1])
        for _ in range(int(rng.integers(self.objects_per_image[0], self.objects_per_image[1] + 1))):
            src = int(self.objects[rng.integers(len(self.objects))])
            digit = images[src]
            rows, cols = np.nonzero(digit > 0)
            ink = digit[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
            # the box's longer side is the object size; the ink keeps its aspect ratio
            size = float(np.exp(rng.uniform(lo, hi)))
            scale = size / max(ink.shape)
            h, w = max(2, int(round(ink.shape[0] * scale))), max(2, int(round(ink.shape[1] * scale)))
            if h > self.canvas_size or w > self.canvas_size:
                continue
            for _try in range(20):
                x0 = int(rng.integers(0, self.canvas_size - w + 1))
                y0 = int(rng.integers(0, self.canvas_size - h + 1))
                box = [float(x0), float(y0), float(x0 + w), float(y0 + h)]
                if not boxes or box_iou(torch.tensor([box]), torch.tensor(boxes)).max() <= self.max_overlap:
                    break
            else:
                continue
            _paste(canvas, _resize(ink, h, w) * rng.uniform(0.8, 1.0), x0, y0)
            boxes.append(box)
            labs.append(int(labels[src]) + 1)
        if self.noise > 0:
            canvas = np.clip(canvas + rng.normal(0.0, self.noise, canvas.shape).astype(np.float32), 0.0, 1.0)
        return canvas, boxes, labs


def export_clutter_coco(out, num_images=300, num_val_images=75, seed=0, **scene_kwargs):
    """Write train and val splits under ``out`` (the layout of ``up data digits-det``);
    returns {split: (ann_file, img_dir)}."""
    from .export import write_split

    written = {}
    for split, n in (("train", num_images), ("val", num_val_images)):
        written[split] = write_split(ClutterScenes(split, n, seed=seed, **scene_kwargs), out, split)
    return written
