"""UP's ``lvisv1`` dataset: an LVIS v1 annotation file (COCO-like JSON) read as the ``coco`` dataset.

What LVIS v1 adds to COCO, and what is done with it:

- images carry no ``file_name``: the file is ``coco_url`` less ``http://images.cocodataset.org/``
  (UP's rule: ``.../train2017/000000391895.jpg`` -> ``train2017/000000391895.jpg`` under
  ``image_dir``);
- images list ``neg_category_ids`` (checked absent) and ``not_exhaustive_category_ids`` (not all
  instances labelled), and categories a ``frequency`` (``r``/``c``/``f``): checked here (lists
  of known category ids, one of r/c/f), used by the ``LVIS`` evaluator (lvis_evaluator.py);
- as UP's LVIS loader: only images with at least one annotation are kept, and an image whose
  single annotation is ``min_size`` pixels wide or high or less is dropped.

Annotations have no ``iscrowd``; everything else (boxes, ids, areas) is checked as for COCO.
"""
from typing import Optional

from ...errors import ConfigError, DataError
from ...registry import DATASETS
from .datasets import CocoDetection, read_json, reader_of, up_spellings, log
from ...data.validation.coco import coco_records
from ...data.validation.common import is_integer, shown

URL_PREFIX = "http://images.cocodataset.org/"
FREQUENCIES = ("r", "c", "f")
IMAGE_LISTS = ("neg_category_ids", "not_exhaustive_category_ids")


def lvis_file_name(coco_url):
    return coco_url.replace(URL_PREFIX, "")


def check_lvis(data, path):
    """Raise one DataError for what COCO's checks do not see: a missing ``coco_url``, an image
    list that is not a list of known category ids, a category ``frequency`` other than r/c/f.
    Returns ({image id: {list name: set of category ids}}, {category id: frequency or None})."""
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("categories"), list):
        return {}, {}  # coco_records names what is wrong with the structure
    freq = {}
    for k, cat in enumerate(data["categories"]):
        if not isinstance(cat, dict) or not is_integer(cat.get("id")):
            return {}, {}
        f = cat.get("frequency")
        if f is not None and f not in FREQUENCIES:
            raise DataError(f"{path}: categories[{k}].frequency must be one of r, c, f, got {shown(f)}")
        freq[cat["id"]] = f
    lists = {}
    for k, img in enumerate(data["images"]):
        if not isinstance(img, dict):
            continue  # coco_records reports it
        url = img.get("coco_url")
        if not isinstance(url, str) or not lvis_file_name(url):
            raise DataError(f"{path}: images[{k}]: LVIS v1 names the image file by 'coco_url' (a string), "
                            f"got {shown(url)}")
        entry = {}
        for key in IMAGE_LISTS:
            ids = img.get(key, [])
            if not isinstance(ids, list) or not all(is_integer(c) for c in ids):
                raise DataError(f"{path}: images[{k}].{key} must be a list of category ids, got {shown(ids)}")
            unknown = [c for c in ids if c not in freq]
            if unknown:
                raise DataError(f"{path}: images[{k}].{key}: unknown category id {unknown[0]}")
            entry[key] = set(ids)
        lists[img.get("id")] = entry
    return lists, freq


def as_coco(data):
    """The LVIS file with each image's ``file_name`` from its ``coco_url`` (a shallow copy)."""
    images = [dict(img, file_name=lvis_file_name(img["coco_url"])) for img in data["images"]]
    return dict(data, images=images)


@DATASETS.register("lvisv1")
class LvisV1Detection(CocoDetection):
    """LVIS v1 JSON + image directory (UP's ``lvisv1``); samples and labels as ``coco``."""

    def __init__(self, meta_file: Optional[str] = None, image_reader: Optional[dict] = None,
                 transformer: Optional[list] = None, source: str = "lvis", has_mask: bool = False,
                 has_grid: bool = False, use_ignore: bool = False, min_size: float = 1,
                 ann_file: Optional[str] = None, img_dir: str = "", transforms: Optional[list] = None,
                 on_bad_record: str = "error", exif_transpose: Optional[bool] = None):
        if has_mask:
            raise ConfigError("has_mask", "instance masks are not loaded: boxes only", "has_mask: false")
        if has_grid:
            raise ConfigError("has_grid", "UP's Grid R-CNN targets are not made here", "has_grid: false")
        if use_ignore:
            raise ConfigError("use_ignore", "LVIS has no ignore regions", "use_ignore: false")
        ann_file, transforms = up_spellings(ann_file, meta_file, transforms, transformer)
        self.reader = reader_of(image_reader, img_dir, exif_transpose)
        self.source = source
        data = read_json(ann_file, "lvisv1 meta_file")
        self.image_lists, self.frequencies = check_lvis(data, ann_file)
        super(CocoDetection, self).__init__(transforms, on_bad_record, [])
        coco = coco_records(as_coco(data) if self.image_lists else data, ann_file, self.bad, self.reader.path_of)
        self.set_classes(coco.class_names, coco.cat_ids)
        self.ann_file, self.img_dir = ann_file, self.reader.image_dir
        self.has_annotations = coco.has_annotations
        records = coco.records
        if any(r["boxes"] for r in records):  # UP: the images some annotation names
            records = [r for r in records if r["boxes"]]
        self.records = [r for r in records if not _single_small_box(r, min_size)]
        dropped = len(records) - len(self.records)
        if dropped:
            log.info("%s: %d image(s) whose one box is %s pixels or less across left out (UP's min_size)",
                     ann_file, dropped, min_size)
        self.report_skipped(ann_file)
        if not self.records:
            raise DataError(f"{ann_file}: no usable images (after skipping {len(self.skipped)} bad record(s))")


def _single_small_box(record, min_size):
    if len(record["boxes"]) != 1:
        return False
    x1, y1, x2, y2 = record["boxes"][0]
    return x2 - x1 <= min_size or y2 - y1 <= min_size
