"""Detection datasets: ``coco`` (instances JSON) and ``custom`` (UP's JSONL); ``digits_det``
(generated scenes) lives in digits_det.py.

A sample is ``{"image": uint8 CxHxW, "target": {...}, "index": int}`` (float32 when the
conversion to the model's input runs in the workers, ``dataset.normalize_on: workers``; see
data/model_input.py; generated scenes hold float [0, 1] pixels); target:
``boxes`` (float32 Nx4 xyxy, transformed-image coordinates), ``labels`` (int64 N, 1..C),
``ignore_boxes`` (crowd / ignored regions), ``area``, ``image_id``, ``orig_size`` and
``img_size`` ((h, w) before / after resizing). ``collate_fn`` keeps lists and adds
``batch["meta"] = {classes, cat_ids}`` (and the batch's ``model_input`` when the device converts). Bad records raise one DataError naming file and record
(``on_bad_record: skip``: counted, reported once, dropped).
"""
import json
import logging
import os
from typing import Optional

import torch
from torch.utils.data import Dataset

from ...data.label_map import check_names
from ...data.model_input import FinalConversion
from ...data.packed_records import PackedIndex, collector_paused
from ...data.readers import PIL_MODE, FileReader, build_reader, read_image
from ...data.validation.coco import coco_records
from ...data.validation.common import EDGE_TOLERANCE, box_problem, clipped  # noqa: F401  (EDGE_TOLERANCE: re-export)
from ...data.validation.up_jsonl import up_jsonl_records
from ...errors import ConfigError, DataError
from ...protocols import BindsDataSet, PerBatch
from ...registry import DATASETS
from ..transforms import build_transforms
from . import transforms as _det_transforms  # noqa: F401  (registers keep_ar_resize_max, flip, pad_to_stride)
from .pipeline import apply_transform, pipeline_ops, to_pipeline
from .first_step import cached_first_step, step_files

__all__ = ["DetDataset", "CocoDetection", "CustomDetection", "DetCollate", "apply_transform", "load_rgb"]

log = logging.getLogger("up")
BAD_RECORD_CHOICES = ("error", "skip")
BAD_RECORD_HINT = "set dataset kwargs on_bad_record: skip to drop such records"  # convert words it its own way


def load_rgb(path, where, exif_transpose=True, context=None):
    """The RGB image at ``path`` as a uint8 CxHxW tensor (``context``: a DataContext, or None)."""
    return read_image(path, "RGB", where, exif_transpose, context=context)


class DetCollate:
    """Images and targets stay per-image lists (sizes differ); ``meta`` carries the label map."""

    def __init__(self, classes, cat_ids):
        self.meta = {"classes": list(classes), "cat_ids": list(cat_ids)}

    def __call__(self, samples):
        return {"image": [s["image"] for s in samples], "target": [s["target"] for s in samples],
                "index": torch.tensor([s["index"] for s in samples], dtype=torch.int64), "meta": self.meta}


class DetDataset(PackedIndex, FinalConversion, Dataset):
    """Records -> samples. Subclasses fill ``self.records`` (dicts with image_id, height, width,
    boxes, labels, ignore, source) and implement ``_image(record)`` -> uint8 (or float [0, 1]) CxHxW."""

    default_evaluator = {"type": "COCO"}

    def __init__(self, transforms, on_bad_record, classes, cat_ids=None):
        if on_bad_record not in BAD_RECORD_CHOICES:
            raise ConfigError("on_bad_record", f"{on_bad_record!r} is not one of error, skip")
        self.set_transforms(transforms)
        self.on_bad_record = on_bad_record
        self.set_classes(classes, cat_ids)
        self.records, self.skipped = [], []

    def image_classes(self):
        """The classes of every record's boxes (repeat-factor sampling; no image is read)."""
        return [sorted(set(r["labels"])) for r in self.records]

    def aspect_ratios(self):
        """height / width of every record (UP's aspect-ratio groups; no image is read)."""
        return [r["height"] / r["width"] for r in self.records]

    def image_files(self):
        """(path, Pillow mode, (height, width)) of every image file the records decode, which the
        image cache (dataset.cache) sizes its slots from; generated or embedded images, and images
        read with exif_transpose: false, are not listed. When the pipeline's first step is a
        deterministic function of the image, what it makes of each image instead (first_step.py)."""
        steps = step_files(self)
        if steps is not None:
            return steps
        reader = getattr(self, "reader", None)
        if not getattr(reader, "exif_transpose", True):
            return []
        mode = PIL_MODE[getattr(reader, "color_mode", "RGB")]
        return [(r["file"], mode, (r["height"], r["width"])) for r in self.records
                if isinstance(r.get("file"), str) and not r.get("embedded")]

    # -- the run's label map (data/label_map.py) ---------------------------------------------
    file_cat_ids = None  # category ids the annotation file gave its classes (COCO)
    numbered_classes = False  # True: labels are indices in the file, their names only numbers (custom)

    def used_labels(self):
        """Positions (0-based) in ``classes`` that some record's box is labelled with."""
        return {label - 1 for r in self.records for label in r.get("labels", ())}

    def relabel(self, mapping, classes, run_ids=None):
        """Label the records with the run's ``classes``: {own position: run position}."""
        from ...data.label_map import run_ids_for

        self.replace_records([dict(r, labels=[mapping[label - 1] + 1 for label in r["labels"]]) if "labels" in r else r
                              for r in self.records])
        if self.file_cat_ids is not None:
            self.file_cat_ids = run_ids_for(mapping, classes, self.cat_ids, run_ids)
            return self.set_classes(classes, self.file_cat_ids)
        self.set_classes(classes, run_ids)

    def set_classes(self, classes, cat_ids=None):
        self.classes, self.num_classes = list(classes), len(classes)
        self.cat_ids = list(cat_ids) if cat_ids is not None else list(range(1, self.num_classes + 1))
        self._collate = DetCollate(self.classes, self.cat_ids)

    def collate_fn(self, samples):
        return self.attach(self._collate(samples))

    # -- bad data --------------------------------------------------------------------------
    def bad(self, message):
        """Raise (error) or remember (skip) one bad record; returns so callers can `continue`."""
        if self.on_bad_record == "error":
            raise DataError(f"{message} ({BAD_RECORD_HINT})")
        self.skipped.append(message)

    def report_skipped(self, what):  # once per dataset, not once per record
        if self.skipped:
            log.warning("%s: skipped %d bad record(s); first: %s", what, len(self.skipped), self.skipped[0])

    def check_box(self, box, width, height, where):
        """Clip a box sticking out by rounding only; None (after self.bad) when unusable."""
        problem = box_problem(box, width, height)
        if problem:
            return self.bad(f"{where}: {problem}")
        return clipped(box, width, height)

    def training_problem(self):
        """Why these records cannot train a detector (None when they can): see data/validation."""
        if not getattr(self, "has_annotations", True):
            return (f"{self.ann_file} has no 'annotations' key: images only, data to predict or evaluate on; "
                    "training needs annotated images")
        # generated scenes (digits_det) draw their boxes per sample: their records hold none to judge
        if all("boxes" in r for r in self.records) and not any(r["boxes"] for r in self.records):
            name = getattr(self, "ann_file", None) or getattr(self, "meta_file", None) or getattr(self, "where", "")
            return (f"{name}: no object to train on ({len(self.records)} image(s), not one box that is not an "
                    "ignore region)")
        return None

    # -- transforms ------------------------------------------------------------------------
    def set_transforms(self, transforms, path="transforms"):
        """Build the pipeline; transforms that draw other samples (mosaic, mixup: they have a
        ``bind`` method) get this dataset, and those holding one choice per batch (multi-scale
        resize: ``begin_batch``/``end_batch``) are remembered for :meth:`begin_batch`."""
        self.set_pipeline(build_transforms(transforms, path))
        ops = list(pipeline_ops(self.transform))
        for op in ops:
            if isinstance(op, BindsDataSet):
                op.bind(self)
        self._per_batch = [op for op in ops if isinstance(op, PerBatch)]

    def begin_batch(self):
        """The seeded loader calls this before the samples of one batch are drawn (after
        seeding): per-batch choices are drawn here, from torch's generator, so they are a
        function of the batch's seed like every other augmentation."""
        for op in self._per_batch:
            op.begin_batch()

    def end_batch(self):
        for op in self._per_batch:
            op.end_batch()

    def load_for_mix(self, index):
        """Another record's image and untransformed target in pipeline form (what a transform
        receives at the head of the pipeline): mosaic and mixup draw these."""
        record = self.records[index]
        image, target = self.load(record)
        self._check_size(image, record)
        return to_pipeline(image, target)

    def _check_size(self, image, record):
        size = tuple(image.shape[-2:])
        if size != (record["height"], record["width"]):
            hint = ""
            if size == (record["width"], record["height"]):  # turned by 90 degrees: its EXIF orientation?
                reader = getattr(self, "reader", None)  # only datasets with a reader have exif_transpose
                exif = getattr(reader, "exif_transpose", True)
                if reader is None:
                    hint = (" (turned by 90 degrees: images are read upright, their EXIF orientation applied, "
                            "so the annotation must describe the upright picture)")
                elif exif:
                    hint = (" (its EXIF orientation turns it; if the annotation describes the stored pixels, set "
                            "exif_transpose: false)")
                else:
                    hint = (" (exif_transpose is false; if the annotation describes the upright picture, set it "
                            "to true)")
            raise DataError(f"{record['source']}: image is {size} (h, w) but the "
                            f"annotation says ({record['height']}, {record['width']}){hint}")

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
        cached = cached_first_step(self)  # dataset.cache holds the first step's output (first_step.py)
        if cached is not None:
            image, target = cached[0].sample(self, record, cached[1])
        else:
            image, target = self.load(record)
            self._check_size(image, record)
            if self.transform is not None:
                image, target = apply_transform(self.transform, image, target)
        return {"image": self.finish(image), "target": target, "index": index}


# -- coco ------------------------------------------------------------------------------------
def up_spellings(ann_file, meta_file, transforms, transformer):
    """UP names the annotation file ``meta_file`` and the pipeline ``transformer``."""
    if ann_file is not None and meta_file is not None:
        raise ConfigError("meta_file", "give ann_file or UP's meta_file, not both")
    if transforms is not None and transformer is not None:
        raise ConfigError("transformer", "give transforms or UP's transformer, not both")
    if (ann_file or meta_file) is None:
        raise ConfigError("ann_file", "required argument is missing (UP: meta_file)")
    return ann_file or meta_file, transforms if transformer is None else transformer


def reader_of(image_reader, img_dir, exif_transpose=None):
    if image_reader is None:
        return FileReader(img_dir, "RGB", exif_transpose=True if exif_transpose is None else exif_transpose)
    if img_dir:
        raise ConfigError("img_dir", "give img_dir here or image_dir in image_reader.kwargs, not both")
    if exif_transpose is not None:
        raise ConfigError("exif_transpose", "give exif_transpose here or in image_reader.kwargs, not both")
    return build_reader(image_reader)


def read_json(path, what):
    from ...paths import open_input  # the one opener of user-named files: a regular file or one line

    try:
        with open_input(path, f"{what}: annotation file", DataError, text=True) as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: malformed JSON: {exc}") from None
    return data


@DATASETS.register("coco")
class CocoDetection(DetDataset):
    """COCO instances JSON + image directory. Category ids map to contiguous labels 1..C (sorted
    by id) and back in results; iscrowd/ignore annotations become ignore regions; images with
    no annotation are kept (``skip_empty: true`` drops them, e.g. for training)."""

    def __init__(self, ann_file: Optional[str] = None, img_dir: str = "", transforms: Optional[list] = None,
                 on_bad_record: str = "error", skip_empty: bool = False, meta_file: Optional[str] = None,
                 image_reader: Optional[dict] = None, transformer: Optional[list] = None,
                 source: Optional[str] = None, has_mask: bool = False, exif_transpose: Optional[bool] = None,
                 has_semantic_seg: bool = False):
        if has_mask:
            raise ConfigError("has_mask", "instance masks are not loaded: boxes only", "has_mask: false")
        if has_semantic_seg:  # UP's multitask files write it out as false
            raise ConfigError("has_semantic_seg", "semantic segmentation maps are not loaded: boxes only",
                              "has_semantic_seg: false")
        ann_file, transforms = up_spellings(ann_file, meta_file, transforms, transformer)
        self.reader = reader_of(image_reader, img_dir, exif_transpose)
        self.source = source  # UP: the data source's name; recorded only
        super().__init__(transforms, on_bad_record, [])
        with collector_paused():
            data = read_json(ann_file, "coco ann_file")
            coco = coco_records(data, ann_file, self.bad, self.reader.path_of)  # ids, keys, boxes: checked there
            del data
        self.set_classes(check_names(coco.class_names, f"{ann_file}: categories' names"), coco.cat_ids)
        self.file_cat_ids = list(coco.cat_ids)
        self.ann_file, self.img_dir = ann_file, self.reader.image_dir
        self.has_annotations = coco.has_annotations
        if not coco.has_annotations:
            log.warning("%s: no 'annotations' key: images only (no ground truth to train or score against)",
                        ann_file)
        self.records = coco.records
        if skip_empty:
            self.records = [r for r in self.records if r["boxes"]]
        self.report_skipped(ann_file)
        if not self.records:
            raise DataError(f"{ann_file}: no usable images (after skipping {len(self.skipped)} bad record(s))")

    def _image(self, record):
        return self.reader.read(record["file"], record["source"], context=self.context)


# -- UP custom JSONL -----------------------------------------------------------------------------
@DATASETS.register("custom")
class CustomDetection(DetDataset):
    """UP's custom format: a JSONL meta_file, one image per line: {filename, image_height,
    image_width, instances: [{bbox: [x1, y1, x2, y2], label: 1..C, is_ignored}]}. Class names
    from ``classes`` (else "1".."C" with C the largest label seen)."""

    def __init__(self, meta_file: str, image_dir: str = "", classes: Optional[list] = None,
                 num_classes: Optional[int] = None, transforms: Optional[list] = None,
                 on_bad_record: str = "error", skip_empty: bool = False, exif_transpose: bool = True):
        if not os.path.isfile(meta_file):
            raise DataError(f"custom meta_file not found: {meta_file}")
        self.reader = FileReader(image_dir, "RGB", exif_transpose=exif_transpose)
        classes = check_names(classes, "classes", key="classes") if classes is not None else None
        if classes is not None and num_classes is not None and len(classes) != num_classes:
            raise ConfigError("classes", f"{len(classes)} names but num_classes is {num_classes}")
        limit = len(classes) if classes is not None else num_classes
        super().__init__(transforms, on_bad_record, classes or [])
        self.meta_file = meta_file
        with open(meta_file, encoding="utf-8") as f:
            records = up_jsonl_records(f, meta_file, image_dir, limit, self.bad)  # keys, boxes, labels: checked there
        if skip_empty:
            records = [r for r in records if r["boxes"]]
        self.report_skipped(meta_file)
        if not records:
            raise DataError(f"{meta_file}: no usable records (empty file or every record skipped)")
        if classes is None:
            n = num_classes or max((max(r["labels"], default=0) for r in records), default=0) or 1
            self.set_classes([str(i) for i in range(1, n + 1)])
            self.numbered_classes = True  # labels are indices in the file: their names only numbers
        self.records = records

    def _image(self, record):
        return self.reader.read(record["file"], record["source"], context=self.context)
