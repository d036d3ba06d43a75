"""Detection datasets: ``coco`` (instances JSON), ``custom`` (UP's JSONL) and ``digits_det``
(scenes of scikit-learn's handwritten digits, generated on the fly, deterministic by seed).

A sample is ``{"image": float32 CxHxW in [0, 1], "target": {...}, "index": int}``; target:
``boxes`` (float32 Nx4 xyxy, transformed-image coordinates), ``labels`` (int64 N, 1..C),
``ignore_boxes`` (crowd / ignored regions), ``area``, ``image_id``, ``orig_size`` and
``img_size`` ((h, w) before / after resizing). ``collate_fn`` keeps lists and adds
``batch["meta"] = {classes, cat_ids}``. Bad records raise one DataError naming file and record
(``on_bad_record: skip``: counted, reported once, dropped).
"""
import json
import logging
import os
from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from ...errors import ConfigError, DataError
from ...registry import DATASETS
from ..transforms import build_transforms
from . import transforms as _det_transforms  # noqa: F401  (registers keep_ar_resize_max, flip, pad_to_stride)

log = logging.getLogger("up")
BAD_RECORD_CHOICES = ("error", "skip")
EDGE_TOLERANCE = 1.0  # pixels a box may stick out of its image (COCO rounding) before it is bad


def load_rgb(path, where):
    from PIL import Image, UnidentifiedImageError  # lazy: only file-backed datasets read images

    try:
        with Image.open(path) as img:
            array = np.asarray(img.convert("RGB"), dtype=np.uint8).copy()
    except FileNotFoundError:
        raise DataError(f"{where}: image not found: {path}") from None
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise DataError(f"{where}: cannot read image {path}: {exc}") from None
    return torch.from_numpy(array).permute(2, 0, 1).float().div_(255.0)


class DetCollate:
    """Images and targets stay per-image lists (sizes differ); ``meta`` carries the label map."""

    def __init__(self, classes, cat_ids):
        self.meta = {"classes": list(classes), "cat_ids": list(cat_ids)}

    def __call__(self, samples):
        return {"image": [s["image"] for s in samples], "target": [s["target"] for s in samples],
                "index": torch.tensor([s["index"] for s in samples], dtype=torch.int64), "meta": self.meta}


class DetDataset(Dataset):
    """Records -> samples. Subclasses fill ``self.records`` (dicts with image_id, height, width,
    boxes, labels, ignore, source) and implement ``_image(record)`` -> float CxHxW."""

    default_evaluator = {"type": "COCO"}

    def __init__(self, transforms, on_bad_record, classes, cat_ids=None):
        if on_bad_record not in BAD_RECORD_CHOICES:
            raise ConfigError("on_bad_record", f"{on_bad_record!r} is not one of error, skip")
        self.transform = build_transforms(transforms, "transforms")
        self.on_bad_record = on_bad_record
        self.set_classes(classes, cat_ids)
        self.records, self.skipped = [], []

    def set_classes(self, classes, cat_ids=None):
        self.classes, self.num_classes = list(classes), len(classes)
        self.cat_ids = list(cat_ids) if cat_ids is not None else list(range(1, self.num_classes + 1))
        self.collate_fn = DetCollate(self.classes, self.cat_ids)

    # -- bad data --------------------------------------------------------------------------
    def bad(self, message):
        """Raise (error) or remember (skip) one bad record; returns so callers can `continue`."""
        if self.on_bad_record == "error":
            raise DataError(message + " (set dataset kwargs on_bad_record: skip to drop such records)")
        self.skipped.append(message)

    def report_skipped(self, what):  # once per dataset, not once per record
        if self.skipped:
            log.warning("%s: skipped %d bad record(s); first: %s", what, len(self.skipped), self.skipped[0])

    def check_box(self, box, width, height, where):
        """Clip a box sticking out by rounding only; None (after self.bad) when unusable."""
        x1, y1, x2, y2 = box
        if not all(np.isfinite(box)) or x2 <= x1 or y2 <= y1:
            self.bad(f"{where}: box {list(box)} has non-positive size")
            return None
        tol = EDGE_TOLERANCE
        if x1 < -tol or y1 < -tol or x2 > width + tol or y2 > height + tol:
            self.bad(f"{where}: box {list(box)} lies outside the {width}x{height} image")
            return None
        return [max(x1, 0.0), max(y1, 0.0), min(x2, float(width)), min(y2, float(height))]

    # -- samples ---------------------------------------------------------------------------
    def __len__(self):
        return len(self.records)

    def target_of(self, record):
        """The untransformed target of one record (original image coordinates)."""
        boxes = torch.tensor(record["boxes"], dtype=torch.float32).reshape(-1, 4)
        ignore = torch.tensor(record.get("ignore", []), dtype=torch.float32).reshape(-1, 4)
        area = record.get("area")
        area = torch.tensor(area, dtype=torch.float32) if area is not None else \
            (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        size = torch.tensor([record["height"], record["width"]], dtype=torch.int64)
        return {"boxes": boxes, "labels": torch.tensor(record["labels"], dtype=torch.int64).reshape(-1),
                "ignore_boxes": ignore, "area": area, "image_id": int(record["image_id"]),
                "orig_size": size, "img_size": size.clone()}

    def load(self, record):  # -> (image, untransformed target)
        return self._image(record), self.target_of(record)

    def __getitem__(self, index):
        record = self.records[index]
        image, target = self.load(record)
        if tuple(image.shape[-2:]) != (record["height"], record["width"]):
            raise DataError(f"{record['source']}: image is {tuple(image.shape[-2:])} (h, w) but the "
                            f"annotation says ({record['height']}, {record['width']})")
        if self.transform is not None:
            image, target = apply_transform(self.transform, image, target)
        return {"image": image, "target": target, "index": index}


def apply_transform(transform, image, target):
    """Run a v2 pipeline on image + boxes (ignore regions move with the boxes)."""
    from torchvision import tv_tensors

    h, w = image.shape[-2:]
    n = len(target["boxes"])
    both = torch.cat([target["boxes"], target["ignore_boxes"]])
    target = dict(target)
    target["boxes"] = tv_tensors.BoundingBoxes(both, format="XYXY", canvas_size=(h, w))
    target.pop("ignore_boxes")
    image, target = transform(tv_tensors.Image(image), target)
    boxes = target["boxes"]
    if "img_size" not in target or target.get("_resized") is None:
        # A plain torchvision resize updates only the boxes' canvas; our resize sets _resized.
        target["img_size"] = torch.tensor(list(boxes.canvas_size), dtype=torch.int64)
    target.pop("_resized", None)
    boxes = boxes.as_subclass(torch.Tensor)
    target["boxes"], target["ignore_boxes"] = boxes[:n].contiguous(), boxes[n:].contiguous()
    return image.as_subclass(torch.Tensor), target


# -- coco ------------------------------------------------------------------------------------
def read_json(path, what):
    if not os.path.isfile(path):
        raise DataError(f"{what}: annotation file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: malformed JSON: {exc}") from None
    return data


@DATASETS.register("coco")
class CocoDetection(DetDataset):
    """COCO instances JSON + image directory. Category ids map to contiguous labels 1..C (sorted
    by id) and back in results; iscrowd/ignore annotations become ignore regions; images with
    no annotation are kept (``skip_empty: true`` drops them, e.g. for training)."""

    def __init__(self, ann_file: str, img_dir: str, transforms: Optional[list] = None,
                 on_bad_record: str = "error", skip_empty: bool = False):
        data = read_json(ann_file, "coco ann_file")
        if not isinstance(data, dict) or not data.get("images") or not isinstance(data.get("categories"), list) \
                or not data["categories"]:
            raise DataError(f"{ann_file}: not a COCO instances file or empty (needs non-empty 'images' and "
                            "'categories' lists)")
        cats = sorted(data["categories"], key=lambda c: c["id"])
        super().__init__(transforms, on_bad_record, [str(c.get("name", c["id"])) for c in cats],
                         [int(c["id"]) for c in cats])
        label_of = {cid: i + 1 for i, cid in enumerate(self.cat_ids)}
        self.ann_file, self.img_dir = ann_file, img_dir
        images, missing = {}, set()
        for k, img in enumerate(data["images"]):
            try:
                rec = {"image_id": int(img["id"]), "file": os.path.join(img_dir, img["file_name"]),
                       "height": int(img["height"]), "width": int(img["width"]),
                       "boxes": [], "labels": [], "area": [], "ignore": [],
                       "source": f"{ann_file}: image id {img['id']} ({img['file_name']})"}
            except (KeyError, TypeError, ValueError) as exc:
                self.bad(f"{ann_file}: images[{k}]: malformed record ({exc!r})")
                continue
            if not os.path.isfile(rec["file"]):
                self.bad(f"{rec['source']}: image file not found: {rec['file']}")
                missing.add(rec["image_id"])
                continue
            images[rec["image_id"]] = rec
        bad_images = set()
        for k, ann in enumerate(data.get("annotations") or []):
            where = f"{ann_file}: annotations[{k}] (id {ann.get('id') if isinstance(ann, dict) else '?'})"
            try:
                image_id, cat, (x, y, bw, bh) = int(ann["image_id"]), int(ann["category_id"]), ann["bbox"]
                box = [float(x), float(y), float(x) + float(bw), float(y) + float(bh)]
            except (KeyError, TypeError, ValueError) as exc:
                self.bad(f"{where}: malformed annotation ({exc!r})")
                if isinstance(ann, dict) and "image_id" in ann:
                    bad_images.add(ann["image_id"])
                continue
            rec = images.get(image_id)
            if rec is None:
                if image_id not in missing:  # annotations of an already skipped image: no new error
                    self.bad(f"{where}: unknown image_id {image_id}")
                continue
            if cat not in label_of:
                self.bad(f"{where}: unknown category_id {cat}")
                bad_images.add(image_id)
                continue
            box = self.check_box(box, rec["width"], rec["height"], where)
            if box is None:
                bad_images.add(image_id)
                continue
            if ann.get("iscrowd", 0) or ann.get("ignore", 0):
                rec["ignore"].append(box)
            else:
                rec["boxes"].append(box)
                rec["labels"].append(label_of[cat])
                rec["area"].append(float(ann.get("area") or (box[2] - box[0]) * (box[3] - box[1])))
        # A skipped annotation drops its whole image: training on half-labelled images would
        # teach the detector that the dropped objects are background.
        self.records = [r for i, r in images.items() if i not in bad_images]
        if skip_empty:
            self.records = [r for r in self.records if r["boxes"]]
        self.report_skipped(ann_file)
        if not self.records:
            raise DataError(f"{ann_file}: no usable images (after skipping {len(self.skipped)} bad record(s))")

    def _image(self, record):
        return load_rgb(record["file"], record["source"])


# -- UP custom JSONL -----------------------------------------------------------------------------
@DATASETS.register("custom")
class CustomDetection(DetDataset):
    """UP's custom format: a JSONL meta_file, one image per line: {filename, image_height,
    image_width, instances: [{bbox: [x1, y1, x2, y2], label: 1..C, is_ignored}]}. Class names
    from ``classes`` (else "1".."C" with C the largest label seen)."""

    def __init__(self, meta_file: str, image_dir: str = "", classes: Optional[list] = None,
                 num_classes: Optional[int] = None, transforms: Optional[list] = None,
                 on_bad_record: str = "error", skip_empty: bool = False):
        if not os.path.isfile(meta_file):
            raise DataError(f"custom meta_file not found: {meta_file}")
        if classes is not None and num_classes is not None and len(classes) != num_classes:
            raise ConfigError("classes", f"{len(classes)} names but num_classes is {num_classes}")
        limit = len(classes) if classes is not None else num_classes
        super().__init__(transforms, on_bad_record, classes or [])
        records = []
        with open(meta_file, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    rec = self._parse(line, f"{meta_file}:{lineno}", image_dir, limit, len(records))
                    if rec is not None:
                        records.append(rec)
        if skip_empty:
            records = [r for r in records if r["boxes"]]
        self.report_skipped(meta_file)
        if not records:
            raise DataError(f"{meta_file}: no usable records (empty file or every record skipped)")
        if classes is None:
            n = num_classes or max((max(r["labels"], default=0) for r in records), default=0) or 1
            self.set_classes([str(i) for i in range(1, n + 1)])
        self.records = records

    def _parse(self, line, where, image_dir, limit, image_id):
        try:
            meta = json.loads(line)
            filename = meta["filename"]
            h, w = int(meta["image_height"]), int(meta["image_width"])
            instances = meta.get("instances") or []
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return self.bad(f"{where}: malformed record ({exc!r})")
        rec = {"image_id": image_id, "file": os.path.join(image_dir, filename), "height": h, "width": w,
               "boxes": [], "labels": [], "ignore": [], "source": f"{where} ({filename})"}
        if not os.path.isfile(rec["file"]):
            return self.bad(f"{rec['source']}: image file not found: {rec['file']}")
        for j, inst in enumerate(instances):
            iwhere = f"{where}: instances[{j}]"
            try:
                box = [float(v) for v in inst["bbox"]]
                label = int(inst.get("label", -1))
                if len(box) != 4:
                    raise ValueError(f"bbox has {len(box)} numbers")
            except (KeyError, TypeError, ValueError) as exc:
                return self.bad(f"{iwhere}: malformed instance ({exc!r})")
            box = self.check_box(box, w, h, iwhere)
            if box is None:
                return None
            if inst.get("is_ignored", False):
                rec["ignore"].append(box)
                continue
            if label < 1 or (limit is not None and label > limit):
                return self.bad(f"{iwhere}: unknown label {label} (labels are 1..{limit or 'C'})")
            rec["boxes"].append(box)
            rec["labels"].append(label)
        return rec

    def _image(self, record):
        return load_rgb(record["file"], record["source"])


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

    def __init__(self, split: str = "train", num_images: int = 1000, canvas_size: int = 64,
                 digits_per_image: list = (1, 4), scale_range: list = (12, 24), noise: float = 0.05,
                 seed: int = 0, channels: int = 3, transforms: Optional[list] = None,
                 on_bad_record: str = "error"):
        if split not in SPLITS or num_images < 1:
            raise ConfigError("split" if split not in SPLITS else "num_images",
                              f"split must be one of {', '.join(SPLITS)} and num_images >= 1")
        if len(digits_per_image) != 2 or not 0 <= digits_per_image[0] <= digits_per_image[1]:
            raise ConfigError("digits_per_image", f"expected [min, max] with 0 <= min <= max, got {digits_per_image}")
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
