"""The annotations of a well-formed COCO file checked as whole arrays, in one pass.

At COCO size (886k annotations) the per-annotation checks of :mod:`.coco` cost several times
pycocotools' whole load. Nearly every file is well formed, so :func:`fast_annotations` first
checks every rule of :func:`.coco.annotation_fields` and :func:`.common.box_problem` at once
(types per column, then numpy on the boxes) and fills the records itself. It gives up, and
leaves the file to the per-annotation pass that names the first bad record, as soon as any
rule fails: both passes produce the same records, and an error message is always the slow
pass's.
"""
import numpy as np

from .common import EDGE_TOLERANCE

_FLAG_VALUES = (0, 1)


def fast_annotations(annotations, by_id, label_of):
    """Fills ``by_id``'s records from ``annotations`` and returns True, or returns False
    (records untouched) when any annotation breaks a rule."""
    if not annotations:
        return True
    try:
        image_ids = [a["image_id"] for a in annotations]
        cat_ids = [a["category_id"] for a in annotations]
        bboxes = [a["bbox"] for a in annotations]
        crowd = [a.get("iscrowd", 0) or a.get("ignore", 0) for a in annotations]
        flags = [(a.get("iscrowd", 0), a.get("ignore", 0)) for a in annotations]
        areas = [a.get("area") for a in annotations]
    except (KeyError, TypeError, AttributeError):  # not a mapping, a key missing
        return False
    if not (all(type(i) is int for i in image_ids) and all(type(c) is int for c in cat_ids)):
        return False
    if not all(type(b) is list and len(b) == 4 for b in bboxes):
        return False
    if not all(type(v) is float or type(v) is int for b in bboxes for v in b):
        return False
    if not all(type(f) in (int, bool) and f in _FLAG_VALUES for pair in flags for f in pair):
        return False
    if not all(a is None or ((type(a) is float or type(a) is int) and 0 <= a < float("inf")) for a in areas):
        return False
    if not all(i in by_id for i in image_ids) or not all(c in label_of for c in cat_ids):
        return False
    xywh = np.array(bboxes, dtype=np.float64).reshape(-1, 4)
    x1, y1 = xywh[:, 0], xywh[:, 1]
    x2, y2 = x1 + xywh[:, 2], y1 + xywh[:, 3]
    width = np.array([by_id[i]["width"] for i in image_ids], dtype=np.float64)
    height = np.array([by_id[i]["height"] for i in image_ids], dtype=np.float64)
    tol = EDGE_TOLERANCE
    ok = (np.isfinite(xywh).all(axis=1) & np.isfinite(x2) & np.isfinite(y2) & (x2 > x1) & (y2 > y1)
          & (x1 >= -tol) & (y1 >= -tol) & (x2 <= width + tol) & (y2 <= height + tol))
    if not ok.all():
        return False
    boxes = np.stack([np.maximum(x1, 0.0), np.maximum(y1, 0.0), np.minimum(x2, width), np.minimum(y2, height)],
                     axis=1)
    box_areas = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).tolist()
    for image_id, cat, box, is_crowd, area, box_area in zip(image_ids, cat_ids, boxes.tolist(), crowd, areas,
                                                            box_areas):
        rec = by_id[image_id]
        if is_crowd:
            rec["ignore"].append(box)
        else:
            rec["boxes"].append(box)
            rec["labels"].append(label_of[cat])
            rec["area"].append(float(area) if area else box_area)
    return True
