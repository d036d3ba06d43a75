"""CVAT for images 1.1 XML: ``<annotations>`` with one ``<image name width height>`` per image
and ``<box label xtl ytl xbr ybr occluded>`` inside it. CVAT's coordinates are continuous
pixel coordinates (xtl 0 is the left edge of the image): used as they are. ``occluded`` is
kept in each object's ``extra``; ``<attribute>`` children are ignored; polygons, polylines,
points and masks have no box here and are counted in a start-up note. Class names: the
``<meta><task><labels>`` (or ``<project>``) declaration, in its order.
"""
import os
from collections import Counter

from ...errors import DataError
from .common import ImageRecord, Obj, Parsed, XmlDoc, count_note, to_float, to_int

OTHER_SHAPES = ("polygon", "polyline", "points", "mask", "cuboid", "ellipse", "skeleton", "tag")


def declared_labels(doc):
    names = [e.text.strip() for e in doc.root.iterfind("meta/*/labels/label/name") if e.text and e.text.strip()]
    return list(dict.fromkeys(names)) or None


def parse_cvat(ann_file, img_dir):
    doc = XmlDoc(ann_file)
    if doc.root.tag != "annotations":
        raise DataError(f"{doc.where(doc.root)}: not a CVAT for images file (the root element must be <annotations>)")
    records, skipped = [], Counter()
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
            label = child.get("label")
            if not label:
                raise DataError(f"{bwhere}: missing attribute 'label'")
            box = [to_float(child.get(k), f"{bwhere} {k}") for k in ("xtl", "ytl", "xbr", "ybr")]
            extra = {"occluded": to_int(child.get("occluded", "0"), f"{bwhere} occluded", "occluded")}
            rec.objects.append(Obj(box, label, bwhere, extra=extra))
        records.append(rec)
    if not records:
        raise DataError(f"{ann_file}: no <image> elements")
    return Parsed(records, classes=declared_labels(doc),
                  notes=count_note(skipped, "{n} <{kind}> element(s) have no box and were skipped"))
