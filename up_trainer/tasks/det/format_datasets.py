"""Detection datasets read straight from labelling tools' formats: ``voc``, ``yolo``,
``labelme`` and ``cvat`` (readers in data/formats/). Samples are the ``coco`` dataset's
(datasets.py): boxes xyxy in pixels, labels 1..C, ignore regions; images are read through
data/readers.py. Each record also keeps its parsed ``objects`` (with the format's own flags)
for ``up data convert``.

Classes: ``classes`` from the config (its order is the label order), else the names the
files declare (YOLO's ``names``, CVAT's label list), else every name found, sorted; all
through the one names check of data/label_map.py. A test split is then mapped onto the train
split's classes by name there (engine/builder.py), so a split's own numbering never reaches
the model. They are logged once at start-up, with what was approximated (polygons as boxes,
rotated boxes enclosed, ...).
"""
import logging
import os
from typing import Optional

from ...data.formats import cvat, labelme, voc, yolo
from ...data.formats.common import sorted_files
from ...data.readers import read_image
from ...data.label_map import check_names
from ...errors import DataError
from ...registry import DATASETS
from .datasets import DetDataset

log = logging.getLogger("up")


class FormatDetection(DetDataset):
    """Parsed records -> DetDataset records: class names to labels, every box checked once."""

    format_name = ""

    def __init__(self, parsed, where, classes, transforms, on_bad_record, skip_empty, ignore_flagged=True):
        names = self._class_names(parsed, classes)
        super().__init__(transforms, on_bad_record, names)
        label_of = {name: i + 1 for i, name in enumerate(names)}
        self.where, self.notes = where, list(parsed.notes)
        for rec in parsed.records:
            out = self._record(rec, label_of, ignore_flagged)
            if out is not None:
                out["image_id"] = len(self.records) + 1
                self.records.append(out)
        if skip_empty:
            self.records = [r for r in self.records if r["boxes"]]
        self.report_skipped(where)
        if not self.records:
            raise DataError(f"{where}: no usable images (after skipping {len(self.skipped)} bad record(s))")
        self._log_summary("given" if classes is not None else "declared in the files" if parsed.classes is not None
                          else "collected from the files, sorted")

    def _class_names(self, parsed, classes):
        """The set's class names (data/label_map.py's one names check), in label order; the run
        maps every other split onto the train set's by name."""
        if classes is not None:
            return check_names(classes, "classes", key="classes")
        if parsed.classes is not None:
            return check_names(parsed.classes, parsed.classes_from or self.format_name)
        return sorted({obj.name for rec in parsed.records for obj in rec.objects}) or ["object"]

    def _record(self, rec, label_of, ignore_flagged):
        out = {"file": rec.file, "file_name": rec.file_name, "height": rec.height, "width": rec.width,
               "boxes": [], "labels": [], "ignore": [], "objects": [], "source": rec.where,
               "embedded": rec.embedded}
        for obj in rec.objects:
            box = self.check_box(obj.box, rec.width, rec.height, obj.where)
            if box is None:
                return None
            if obj.name not in label_of:
                return self.bad(f"{obj.where}: class {obj.name!r} is not one of the {len(label_of)} classes "
                                f"({', '.join(list(label_of)[:10])}{', ...' if len(label_of) > 10 else ''})")
            out["objects"].append(obj)
            if obj.ignore and ignore_flagged:
                out["ignore"].append(box)
            else:
                out["boxes"].append(box)
                out["labels"].append(label_of[obj.name])
        return out

    def _log_summary(self, origin):
        boxes = sum(len(r["boxes"]) for r in self.records)
        ignored = sum(len(r["ignore"]) for r in self.records)
        log.info("%s %s: %d images, %d boxes, %d ignore regions; %d classes (%s): %s", self.format_name,
                 self.where, len(self.records), boxes, ignored, self.num_classes, origin, ", ".join(self.classes))
        for note in self.notes:
            log.info("%s %s: note: %s", self.format_name, self.where, note)

    def _image(self, record):
        return read_image(record["file"], "RGB", record["source"], context=self.context)


@DATASETS.register("voc")
class VocDetection(FormatDetection):
    """Pascal VOC: ``root`` (Annotations/, JPEGImages/, ImageSets/Main/<split>.txt) or
    ``ann_dir`` + ``img_dir``. ``difficult`` objects are ignore regions unless
    ``keep_difficult``. Boxes: x1 = xmin - 1, y1 = ymin - 1, x2 = xmax, y2 = ymax."""

    format_name = "voc"

    def __init__(self, root: Optional[str] = None, split: Optional[str] = None, ann_dir: Optional[str] = None,
                 img_dir: Optional[str] = None, classes: Optional[list] = None, keep_difficult: bool = False,
                 transforms: Optional[list] = None, on_bad_record: str = "error", skip_empty: bool = False):
        files, images = voc.voc_files(root, split, ann_dir, img_dir)
        where = f"{root} ({split})" if root and split else (root or ann_dir)
        super().__init__(voc.parse_voc(files, images), where, classes, transforms, on_bad_record, skip_empty,
                         ignore_flagged=not keep_difficult)


@DATASETS.register("yolo")
class YoloDetection(FormatDetection):
    """YOLO txt in Ultralytics' layout: ``data`` (a data.yaml) and ``split`` (train, val or
    test), or ``root`` (with images/<split>, labels/<split>) and ``classes``."""

    format_name = "yolo"

    def __init__(self, data: Optional[str] = None, split: str = "train", root: Optional[str] = None,
                 classes: Optional[list] = None, transforms: Optional[list] = None, on_bad_record: str = "error",
                 skip_empty: bool = False):
        images, names, image_root = yolo.yolo_split(data, split, root, classes)
        self.image_root = image_root
        super().__init__(yolo.parse_yolo(images, names, image_root), f"{data or root} ({split})", None,
                         transforms, on_bad_record, skip_empty)


@DATASETS.register("labelme")
class LabelmeDetection(FormatDetection):
    """LabelMe: every ``*.json`` in ``ann_dir``; images by each file's imagePath (relative to
    the JSON, or to ``img_dir``), else its embedded imageData."""

    format_name = "labelme"

    def __init__(self, ann_dir: str, img_dir: Optional[str] = None, classes: Optional[list] = None,
                 transforms: Optional[list] = None, on_bad_record: str = "error", skip_empty: bool = False):
        if not os.path.isdir(ann_dir):
            raise DataError(f"labelme ann_dir is not a directory: {ann_dir}")
        files = sorted_files(ann_dir, (".json",))
        if not files:
            raise DataError(f"labelme: no annotation files (*.json) in {ann_dir}")
        parsed = labelme.parse_labelme(files, img_dir)
        labelme.extract_embedded(parsed.records)
        super().__init__(parsed, ann_dir, classes, transforms, on_bad_record, skip_empty)


@DATASETS.register("cvat")
class CvatDetection(FormatDetection):
    """CVAT for images 1.1: ``ann_file`` (annotations.xml) and ``img_dir`` (image names are
    relative to it); box elements only, ``occluded`` kept."""

    format_name = "cvat"

    def __init__(self, ann_file: str, img_dir: str = "", classes: Optional[list] = None,
                 transforms: Optional[list] = None, on_bad_record: str = "error", skip_empty: bool = False):
        super().__init__(cvat.parse_cvat(ann_file, img_dir), ann_file, classes, transforms, on_bad_record,
                         skip_empty)
