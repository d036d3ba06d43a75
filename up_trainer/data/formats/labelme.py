"""LabelMe JSON: one file per image, ``shapes`` of ``{label, points, shape_type}``.

``rectangle`` (two opposite corners, in any order) is a box; ``polygon`` becomes its bounding
box and ``circle`` (centre, a point on the rim) its bounding square, each counted in a
start-up note; ``point``, ``line``, ``linestrip`` and ``mask`` have no box and are skipped
(counted too). The image is ``imagePath`` relative to the JSON file (or to ``img_dir``);
when that file is absent, ``imageData`` (base64, embedded) is written to a private temporary
file (removed at exit) and read from there. LabelMe's
points are continuous pixel coordinates: used as they are.
"""
import json
import math
import os
from collections import Counter

from ...errors import DataError
from .common import ImageRecord, Obj, Parsed, count_note, image_size, object_name, to_float, to_int

AS_BOX = ("rectangle", "polygon", "circle")


def shape_box(shape, where):
    kind = shape.get("shape_type") or "polygon"  # LabelMe's own default
    points = shape.get("points")
    if not isinstance(points, list) or not points or not all(isinstance(p, list) and len(p) == 2 for p in points):
        raise DataError(f"{where}: 'points' must be a list of [x, y] pairs")
    points = [[to_float(x, where), to_float(y, where)] for x, y in points]
    if kind == "circle":
        if len(points) != 2:
            raise DataError(f"{where}: a circle needs 2 points (centre, rim), got {len(points)}")
        (cx, cy), (px, py) = points
        r = math.hypot(px - cx, py - cy)
        return [cx - r, cy - r, cx + r, cy + r]
    if kind == "rectangle" and len(points) != 2:
        raise DataError(f"{where}: a rectangle needs 2 points, got {len(points)}")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return [min(xs), min(ys), max(xs), max(ys)]


def read_labelme(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: malformed JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("shapes"), list):
        raise DataError(f"{path}: not a LabelMe file (needs a 'shapes' list)")
    return data


def parse_labelme(files, img_dir=None):
    records, approximated, skipped = [], Counter(), Counter()
    for path in files:
        data = read_labelme(path)
        name = data.get("imagePath")
        if not isinstance(name, str) or not name:
            raise DataError(f"{path}: missing 'imagePath'")
        name = name.replace("\\", "/")  # LabelMe on Windows writes ..\images\a.jpg
        image = os.path.normpath(os.path.join(img_dir or os.path.dirname(path), name))
        embedded = None
        if not os.path.isfile(image):
            if not data.get("imageData"):
                raise DataError(f"{path}: image file not found: {image} (and no imageData embedded)")
            embedded = path
        if "imageWidth" in data and "imageHeight" in data:
            width = to_int(data["imageWidth"], f"{path}: imageWidth", "imageWidth")
            height = to_int(data["imageHeight"], f"{path}: imageHeight", "imageHeight")
        elif embedded is None:
            width, height = image_size(image, path)
        else:
            raise DataError(f"{path}: imageWidth and imageHeight are needed with embedded imageData")
        rec = ImageRecord(image, name, width, height, path, embedded=embedded)
        for k, shape in enumerate(data["shapes"]):
            where = f"{path}: shapes[{k}]"
            if not isinstance(shape, dict) or not isinstance(shape.get("label"), str):
                raise DataError(f"{where}: expected a mapping with a 'label' string")
            kind = shape.get("shape_type") or "polygon"
            if kind not in AS_BOX:
                skipped[kind] += 1
                continue
            if kind != "rectangle":
                approximated[kind] += 1
            rec.objects.append(Obj(shape_box(shape, where), object_name(shape["label"], f"{where} label"), where,
                                   extra={"shape_type": kind}))
        records.append(rec)
    notes = count_note(approximated, "{n} {kind} shape(s) became their bounding box")
    notes += count_note(skipped, "{n} {kind} shape(s) have no box and were skipped")
    return Parsed(records, notes=notes)


def extract_embedded(records):
    """Write every embedded image (imageData) to a file of its own in a private temporary
    folder, removed at exit, so it is read (and cached) like any other image file."""
    import atexit
    import base64
    import binascii
    import shutil
    import tempfile

    embedded = [rec for rec in records if rec.embedded]
    if not embedded:
        return
    folder = tempfile.mkdtemp(prefix="up-labelme-")
    atexit.register(shutil.rmtree, folder, True)
    for k, rec in enumerate(embedded):
        try:
            data = base64.b64decode(read_labelme(rec.embedded)["imageData"], validate=True)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise DataError(f"{rec.embedded}: imageData is not base64: {exc}") from None
        rec.file = os.path.join(folder, f"{k:06d}_{os.path.basename(rec.file_name)}")
        with open(rec.file, "wb") as f:
            f.write(data)
