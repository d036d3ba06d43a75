"""COCO instances JSON -> detection records, every id, key, type, reference and box checked once.

Errors whatever ``on_bad_record`` says (the file's structure, or which record an id means, is
in doubt): not a JSON object; ``images`` or ``categories`` missing or empty; ``annotations``
neither a list nor absent; a category that is not ``{id: int, name}``; an id repeated among
images, annotations or categories; one image file listed under two image entries.

Record problems (``on_bad_record: skip`` drops the image and counts them): an image entry
without ``id`` (int), ``file_name`` (str), ``height`` / ``width`` (positive integers) or whose
file is missing; an annotation without ``image_id`` (int), ``category_id`` (int) or ``bbox``
(4 finite numbers), with an ``image_id`` or ``category_id`` that no entry has, an ``iscrowd``
other than 0/1, a negative or non-finite ``area``, a box of no size or outside its image.

A file without an ``annotations`` key holds images only: fine to evaluate or predict on (with
a warning), refused as ``dataset.train`` (see ``training_problem`` of the dataset).
"""
import os
from dataclasses import dataclass

from ...errors import DataError
from .coco_fast import fast_annotations
from .common import (FirstSeen, box_problem, clipped, flag_problem, four_numbers, is_integer, is_number,
                     shown, size_problem)


@dataclass
class CocoRecords:
    records: list          # DetDataset records, in the file's image order
    class_names: list      # by ascending category id
    cat_ids: list
    has_annotations: bool  # False: the file has no 'annotations' key (inference data)


def coco_records(data, path, bad, path_of):
    """Validate a parsed COCO file. ``bad(message)`` raises or records a skippable problem;
    ``path_of(file_name)`` gives an image's path."""
    if not isinstance(data, dict):
        raise DataError(f"{path}: not a COCO instances file: expected a JSON object with 'images', 'annotations' "
                        f"and 'categories', got a JSON {type(data).__name__}")
    images, categories = data.get("images"), data.get("categories")
    if not isinstance(images, list) or not images or not isinstance(categories, list) or not categories:
        raise DataError(f"{path}: not a COCO instances file or empty (needs non-empty 'images' and "
                        "'categories' lists)")
    annotations = data.get("annotations")
    if annotations is not None and not isinstance(annotations, list):
        raise DataError(f"{path}: 'annotations' must be a list, got {shown(annotations)}")
    cats = check_categories(categories, path)
    check_unique_ids(path, images, annotations or [])
    label_of = {c["id"]: i + 1 for i, c in enumerate(cats)}
    by_id, unusable = image_records(images, path, bad, path_of)
    dropped = set()
    checked_at_once = fast_annotations(annotations or [], by_id, label_of)
    for k, ann in enumerate([] if checked_at_once else annotations or []):
        named = isinstance(ann, dict) and "id" in ann
        where = f"{path}: annotations[{k}]" + (f" (id {str(ann['id'])[:40]})" if named else "")
        fields = annotation_fields(ann, where, bad)
        if fields is None:
            if isinstance(ann, dict) and is_integer(ann.get("image_id")):
                dropped.add(ann["image_id"])
            continue
        image_id, category_id, box, crowd, area = fields
        rec = by_id.get(image_id)
        if rec is None:
            if image_id not in unusable:  # an already reported image: no second message
                bad(f"{where}: unknown image_id {image_id} (no entry in 'images' has it)")
            continue
        if category_id not in label_of:
            bad(f"{where}: unknown category_id {category_id} (categories: "
                f"{', '.join(str(c) for c in list(label_of)[:10])}{', ...' if len(label_of) > 10 else ''})")
            dropped.add(image_id)
            continue
        problem = box_problem(box, rec["width"], rec["height"])
        if problem:
            bad(f"{where}: {problem}")
            dropped.add(image_id)
            continue
        box = clipped(box, rec["width"], rec["height"])
        if crowd:
            rec["ignore"].append(box)
        else:
            rec["boxes"].append(box)
            rec["labels"].append(label_of[category_id])
            rec["area"].append(area or (box[2] - box[0]) * (box[3] - box[1]))
    # A skipped annotation drops its whole image: training on half-labelled images would
    # teach the detector that the dropped objects are background.
    records = [r for i, r in by_id.items() if i not in dropped]
    return CocoRecords(records, [str(c.get("name", c["id"])) for c in cats], [c["id"] for c in cats],
                       annotations is not None)


def check_categories(categories, path):
    """Mappings with a unique integer ``id``, sorted by it (the ids become the label map, so a
    bad one is an error, never skipped)."""
    seen = FirstSeen()
    for k, cat in enumerate(categories):
        where = f"{path}: categories[{k}]"
        if not isinstance(cat, dict):
            raise DataError(f"{where}: expected a mapping {{id, name}}, got {type(cat).__name__} {str(cat)[:40]}")
        if "id" not in cat:
            raise DataError(f"{where}: missing 'id' (keys: {', '.join(map(str, cat)) or 'none'})")
        cid = cat["id"]
        if not is_integer(cid):
            raise DataError(f"{where}: 'id' must be an integer, got {type(cid).__name__} {str(cid)[:40]!r}")
        first = seen.repeat_of(cid, k)
        if first is not None:
            raise DataError(f"{where}: duplicate category id {cid} (categories[{first}].id)")
    return sorted(categories, key=lambda c: c["id"])


def check_unique_ids(path, images, annotations):
    """Image ids, annotation ids and image files are unique: with two images under one id, the
    annotations of one would be drawn on the other."""
    for section, key, entries in (("images", "id", images), ("images", "file_name", images),
                                  ("annotations", "id", annotations)):
        seen = FirstSeen()
        for k, entry in enumerate(entries):
            if not isinstance(entry, dict) or key not in entry or entry[key] is None:
                continue  # reported with the record
            first = seen.repeat_of(entry[key], k)
            if first is not None:
                value = entry[key] if key == "id" else repr(entry[key])
                why = "the same image file under two ids" if key == "file_name" else "ids must be unique"
                raise DataError(f"{path}: {section}[{k}].{key} {value} repeats {section}[{first}].{key} ({why})")


def image_records(images, path, bad, path_of):
    """{image id: empty record} of the usable image entries, and the ids of the others."""
    by_id, unusable = {}, set()
    for k, img in enumerate(images):
        where = f"{path}: images[{k}]"
        problem = image_problem(img)
        if problem:
            bad(f"{where}: {problem}")
            if isinstance(img, dict) and is_integer(img.get("id")):
                unusable.add(img["id"])
            continue
        rec = {"image_id": img["id"], "file": path_of(img["file_name"]), "height": int(img["height"]),
               "width": int(img["width"]), "boxes": [], "labels": [], "area": [], "ignore": [],
               "source": f"{path}: image id {img['id']} ({img['file_name']})"}
        if not os.path.isfile(rec["file"]):
            bad(f"{rec['source']}: image file not found: {rec['file']}")
            unusable.add(img["id"])
            continue
        by_id[img["id"]] = rec
    return by_id, unusable


def image_problem(img):
    if not isinstance(img, dict):
        return f"expected a mapping {{id, file_name, height, width}}, got {shown(img)}"
    if "id" not in img:
        return "missing 'id'"
    if not is_integer(img["id"]):
        return f"'id' must be an integer, got {shown(img['id'])}"
    if not isinstance(img.get("file_name"), str) or not img["file_name"]:
        return f"'file_name' must be a file name, got {shown(img.get('file_name'))}"
    return size_problem(img, "height") or size_problem(img, "width")


def annotation_fields(ann, where, bad):
    """(image_id, category_id, xyxy box, crowd, area or None), or None after ``bad``."""
    if not isinstance(ann, dict):
        return bad(f"{where}: malformed annotation: expected a mapping, got {shown(ann)}")
    for key in ("image_id", "category_id", "bbox"):
        if key not in ann:
            return bad(f"{where}: malformed annotation: missing '{key}'")
    for key in ("image_id", "category_id"):
        if not is_integer(ann[key]):
            return bad(f"{where}: malformed annotation: '{key}' must be an integer, got {shown(ann[key])}")
    xywh = four_numbers(ann["bbox"])
    if xywh is None:
        return bad(f"{where}: malformed annotation: 'bbox' must be 4 finite numbers [x, y, width, height], "
                   f"got {shown(ann['bbox'])}")
    problem = flag_problem(ann, "iscrowd") or flag_problem(ann, "ignore")
    if problem:
        return bad(f"{where}: malformed annotation: {problem}")
    area = ann.get("area")
    if area is not None and not (is_number(area) and 0 <= area < float("inf")):
        return bad(f"{where}: malformed annotation: 'area' must be a finite number >= 0, got {shown(area)}")
    x, y, w, h = xywh
    crowd = bool(ann.get("iscrowd", 0) or ann.get("ignore", 0))
    return ann["image_id"], ann["category_id"], [x, y, x + w, y + h], crowd, float(area) if area else None
