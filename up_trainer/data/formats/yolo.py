"""YOLO txt as Ultralytics lays it out.

``data.yaml``: ``path`` (the root; relative to the YAML's folder), ``train`` / ``val`` /
``test`` (an image folder, a .txt listing images, or a list of either; relative to ``path``)
and ``names`` (a list, or a mapping {id: name}). Each image's labels are the .txt file at the
image's path with the last ``images`` folder replaced by ``labels`` and the suffix by .txt,
one object a line: ``class cx cy w h`` normalized to 0..1 by the image's width and height.
A line of more than five numbers is a segment (``class x1 y1 x2 y2 ...``) and becomes its
bounding box. An image without a label file, or with an empty one, is a negative.
"""
import os

import yaml

from ...errors import ConfigError, DataError
from ..label_map import check_names
from .common import (IMAGE_EXTENSIONS, ImageRecord, Obj, Parsed, image_size, require_dir, text_lines,
                     to_float, to_int)

SPLIT_KEYS = ("train", "val", "test")


def read_data_yaml(path):
    """(root, {split: source}, names list) of an Ultralytics data.yaml."""
    if not os.path.isfile(path):
        raise DataError(f"yolo data file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: malformed YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a mapping with path, train, val and names")
    base = os.path.dirname(os.path.abspath(path))
    root = os.path.join(base, str(data.get("path") or ""))
    splits = {k: data[k] for k in SPLIT_KEYS if data.get(k)}
    return root, splits, names_list(data.get("names"), f"{path}: names")


def names_list(names, where, key=None):
    """``names`` as a list indexed by class id (a mapping must cover 0..N-1), through the one
    names check (data/label_map.py): duplicates would merge two classes. ``key``: a config key
    (``classes``) the error names instead of a file."""
    if isinstance(names, dict) and names:
        if set(names) != set(range(len(names))) or not all(type(i) is int for i in names):
            message = f"class ids must be 0..{len(names) - 1}, got {sorted(map(str, names))[:8]}"
            raise ConfigError(key, message) if key else DataError(f"{where}: {message}")
        names = [names[i] for i in range(len(names))]
    return check_names(names, where, key=key)


def split_images(root, source, where):
    """Image paths of one split: a folder (searched recursively), a .txt list, or a list."""
    sources = source if isinstance(source, list) else [source]
    images = []
    for item in sources:
        path = os.path.join(root, str(item))
        if not os.path.exists(path) and str(item).startswith("../"):  # Roboflow's exports, as Ultralytics reads them
            path = os.path.join(root, str(item)[3:])
        if os.path.isdir(path):
            found = [os.path.join(d, f) for d, _, files in os.walk(path) for f in files
                     if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith(".")]
            images += sorted(found)
        elif os.path.isfile(path) and path.endswith(".txt"):
            for _, line in text_lines(path):
                if line.strip():  # Ultralytics: relative to the list's root, './' or not
                    images.append(os.path.normpath(os.path.join(root, line.strip())))
        else:
            raise DataError(f"{where}: {item!r} is neither an image folder nor a .txt list ({path})")
    if not images:
        raise DataError(f"{where}: no images ({', '.join(IMAGE_EXTENSIONS)}) under {source!r}")
    return images


def label_path(image):
    """Ultralytics' rule: .../images/<rest>.png -> .../labels/<rest>.txt (the last 'images')."""
    head, sep, tail = image.rpartition(os.sep + "images" + os.sep)
    if not sep:
        raise DataError(f"{image}: a YOLO image must lie under an 'images' folder (labels go in 'labels')")
    return os.path.splitext(head + os.sep + "labels" + os.sep + tail)[0] + ".txt"


def parse_label_file(path, width, height, names):
    objects = []
    for lineno, line in text_lines(path):
        fields = line.split()
        if not fields:
            continue
        where = f"{path}:{lineno}"
        if len(fields) < 5 or (len(fields) > 5 and len(fields) % 2 == 0):
            raise DataError(f"{where}: expected 'class cx cy w h' (or 'class x1 y1 x2 y2 ...'), "
                            f"got {line.strip()!r}")
        cls = to_int(fields[0], where, "class id")
        if not 0 <= cls < len(names):
            raise DataError(f"{where}: class id {cls} is out of range "
                            f"(names has {len(names)}: 0..{len(names) - 1})")
        values = [to_float(v, where) for v in fields[1:]]
        extra = {}
        if len(values) == 4:
            cx, cy, w, h = values
            box = [(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height]
        else:
            xs, ys = values[0::2], values[1::2]
            box = [min(xs) * width, min(ys) * height, max(xs) * width, max(ys) * height]
            extra["segment"] = True
        objects.append(Obj(box, names[cls], where, extra=extra))
    return objects


def parse_yolo(images, names, image_root):
    records, segments = [], 0
    for image in images:
        width, height = image_size(image, image)
        labels = label_path(image)
        rec = ImageRecord(image, os.path.relpath(image, image_root), width, height, labels)
        if os.path.isfile(labels):
            rec.objects = parse_label_file(labels, width, height, names)
            segments += sum(1 for o in rec.objects if o.extra.get("segment"))
        records.append(rec)
    notes = [f"{segments} segment(s) became their bounding box"] if segments else []
    return Parsed(records, classes=list(names), notes=notes)


def yolo_split(data=None, split="train", root=None, names=None):
    """(images, names, the folder image names are relative to) from a data.yaml, or from a
    root with images/<split>."""
    if data is not None:
        yroot, splits, ynames = read_data_yaml(data)
        if split not in splits:
            raise DataError(f"{data}: no {split!r} split (has: {', '.join(splits) or 'none'})")
        names = names_list(names, "classes", key="classes") if names is not None else ynames
        images = split_images(yroot, splits[split], f"{data}: {split}")
        return images, names, os.path.commonpath([os.path.dirname(i) for i in images])
    if root is None or names is None:
        raise DataError("yolo: give data (a data.yaml) or root and classes")
    folder = require_dir(os.path.join(root, "images", split), f"yolo split {split!r}")
    images = split_images(root, os.path.relpath(folder, root), f"yolo {root}: {split}")
    return images, names_list(names, "classes", key="classes"), folder
