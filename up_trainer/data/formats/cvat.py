"""CVAT for images 1.1 XML: ``<annotations>`` with one ``<image name width height>`` per image
and ``<box label xtl ytl xbr ybr occluded>`` inside it. CVAT's coordinates are continuous
pixel coordinates (xtl 0 is the left edge of the image): used as they are. ``occluded`` is
kept in each object's ``extra``; a box turned by ``rotation`` degrees becomes the axis-aligned
box enclosing it (cut to the image; counted in a start-up note, its angle kept in ``extra``);
``<attribute>`` children are ignored; polygons, polylines,
points and masks have no box here and are counted in a start-up note. Class names: the
``<meta><task><labels>`` (or ``<project>``) declaration, in its order.
"""
import math
import os
from collections import Counter

from ...errors import DataError
from .common import ImageRecord, Obj, Parsed, XmlDoc, count_note, object_name, to_float, to_int

OTHER_SHAPES = ("polygon", "polyline", "points", "mask", "cuboid", "ellipse", "skeleton", "tag")


def declared_labels(doc):
    """The <meta> label names, as written (checked with every other set of names)."""
    names = [e.text or "" for e in doc.root.iterfind("meta/*/labels/label/name")]
    return names or None


def parse_cvat(ann_file, img_dir):
    doc = XmlDoc(ann_file)
    if doc.root.tag != "annotations":
        raise DataError(f"{doc.where(doc.root)}: not a CVAT for images file (the root element must be <annotations>)")
    records, skipped, rotated = [], Counter(), 0
    for image in doc.root.iter("image"):
        where = doc.where(image)
        name = image.get("name")
        if not name:
            raise DataError(f"{where}: missing attribute 'name'")
        width = to_int(image.get("width"), f"{where} width", "width")
        height = to_int(image.get("height"), f"{where} height", "height")
        path = os.path.join(img_dir, name)
        if not os.path.isfile(path):
            raise DataError(f"{where}: image file not found: {path}")
        rec = ImageRecord(path, name, width, height, where)
        for child in image:
            if child.tag != "box":
                skipped[child.tag] += child.tag in OTHER_SHAPES
                continue
            bwhere = doc.where(child)
            if child.get("label") is None:
                raise DataError(f"{bwhere}: missing attribute 'label'")
            label = object_name(child.get("label"), bwhere)
            box = [to_float(child.get(k), f"{bwhere} {k}") for k in ("xtl", "ytl", "xbr", "ybr")]
            extra = {"occluded": to_int(child.get("occluded", "0"), f"{bwhere} occluded", "occluded")}
            angle = to_float(child.get("rotation", "0"), f"{bwhere} rotation") % 360.0
            if angle:
                box = enclosing_box(box, angle, width, height)
                extra["rotation"] = angle
                rotated += 1
            rec.objects.append(Obj(box, label, bwhere, extra=extra))
        records.append(rec)
    if not records:
        raise DataError(f"{ann_file}: no <image> elements")
    notes = [f"{rotated} rotated box(es) became their enclosing axis-aligned box"] if rotated else []
    tracks = sum(1 for _ in doc.root.iter("track"))  # CVAT for video: frames, not <image> elements
    if tracks:
        notes.append(f"{tracks} <track> element(s) were skipped (video annotations: export as "
                     "'CVAT for images 1.1')")
    return Parsed(records, classes=declared_labels(doc), classes_from=f"{ann_file}: <meta> <labels>",
                  notes=notes + count_note(skipped, "{n} <{kind}> element(s) have no box and were skipped"))


def enclosing_box(box, angle, width, height):
    """The axis-aligned box enclosing ``box`` turned by ``angle`` degrees (CVAT turns a box
    clockwise about its centre), cut to the image: the turned box lies in the image, its
    enclosing box may not. Degenerate boxes stay degenerate, for the box check to name."""
    x1, y1, x2, y2 = box
    if x2 <= x1 or y2 <= y1:
        return box
    cx, cy, hw, hh = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
    cos, sin = abs(math.cos(math.radians(angle))), abs(math.sin(math.radians(angle)))
    ew, eh = hw * cos + hh * sin, hw * sin + hh * cos
    return [max(cx - ew, 0.0), max(cy - eh, 0.0), min(cx + ew, float(width)), min(cy + eh, float(height))]
