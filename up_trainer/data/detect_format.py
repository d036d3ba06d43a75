"""Which labelling tool's layout a folder holds, and its splits as dataset kwargs
(``up train --data DIR``).

Recognised, by what each tool writes (the same layouts ``up data convert --from`` reads):

- ``voc``: a root with ``Annotations/`` (XML) and ``JPEGImages/``; splits from
  ``ImageSets/Main/<split>.txt``.
- ``yolo``: a ``data.yaml`` (given, or inside DIR) with ``train`` / ``val`` and ``names``.
- ``coco``: ``annotations/instances_<split>.json`` with ``images/<split>/`` (``up data digits-det``
  and ``up data convert --to coco`` write this), or DIR with one ``*.json`` COCO file and its
  images beside it.
- ``cvat``: ``annotations.xml`` (CVAT for images 1.1) with its images in DIR or ``images/``.
- ``labelme``: ``*.json`` files holding ``shapes`` (one per image).

A folder matching none, or more than one, is refused in one line (``--format`` settles it).
"""
import glob
import json
import os

from ..errors import DataError
from .formats.yolo import read_data_yaml

FORMATS = ("coco", "voc", "yolo", "labelme", "cvat")
SPLIT_NAMES = ("train", "val")


def _peek_json(path):
    """The top-level keys of a JSON file (empty when it is not a readable JSON object)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return set()
    return set(data) if isinstance(data, dict) else set()


def _yolo_yaml(path):
    if os.path.isfile(path):
        return path if path.endswith((".yaml", ".yml")) else None
    for name in ("data.yaml", "data.yml", "dataset.yaml"):
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    return None


def _coco_files(path):
    """{split: (ann_file, img_dir)} of a COCO layout in ``path``, or {}."""
    found = {}
    for ann in sorted(glob.glob(os.path.join(path, "annotations", "instances_*.json"))):
        split = os.path.basename(ann)[len("instances_"):-len(".json")]
        img_dir = os.path.join(path, "images", split)
        found[split] = (ann, img_dir if os.path.isdir(img_dir) else os.path.join(path, "images"))
    if not found:
        coco = [f for f in sorted(glob.glob(os.path.join(path, "*.json")))
                if {"images", "annotations", "categories"} <= _peek_json(f)]
        if len(coco) == 1:
            found["all"] = (coco[0], path)
    return found


def _cvat_file(path):
    ann = os.path.join(path, "annotations.xml")
    return ann if os.path.isfile(ann) else None


def _is_labelme(path):
    files = sorted(glob.glob(os.path.join(path, "*.json")))[:5]
    return bool(files) and all("shapes" in _peek_json(f) for f in files)


def _is_voc(path):
    return os.path.isdir(os.path.join(path, "Annotations"))


_PROBES = {"voc": _is_voc, "yolo": _yolo_yaml, "coco": _coco_files, "cvat": _cvat_file, "labelme": _is_labelme}


def detect_format(path):
    """The one format ``path`` holds; DataError naming the candidates otherwise."""
    if not os.path.exists(path):
        raise DataError(f"--data {path}: no such file or directory")
    if os.path.isfile(path):
        if _yolo_yaml(path):
            return "yolo"
        raise DataError(f"--data {path}: give a folder (a VOC root, a COCO, LabelMe or CVAT folder) or a YOLO "
                        "data.yaml")
    found = [fmt for fmt in FORMATS if _PROBES[fmt](path)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise DataError(f"--data {path}: no detection data set recognised (a VOC root with Annotations/, a YOLO "
                        "data.yaml, annotations/instances_<split>.json + images/, a CVAT annotations.xml or LabelMe "
                        "*.json files); give --format if it is one of these in another layout")
    raise DataError(f"--data {path}: looks like {' and '.join(found)}; give --format {'|'.join(found)}")


def split_kwargs(fmt, path):
    """{split: dataset kwargs} the layout holds ("train" / "val" when it has them; else one
    split named "all", to be divided by a seeded split)."""
    if fmt == "yolo":
        data = _yolo_yaml(path)
        if data is None:
            raise DataError(f"--data {path}: --format yolo needs a data.yaml (Ultralytics' layout)")
        _, held, _ = read_data_yaml(data)
        if "train" in held and "val" in held:
            return {s: {"data": data, "split": s} for s in SPLIT_NAMES}
        return {"all": {"data": data, "split": next(iter(held), "train")}}
    if fmt == "voc":
        main = os.path.join(path, "ImageSets", "Main")
        if all(os.path.isfile(os.path.join(main, f"{s}.txt")) for s in SPLIT_NAMES):
            return {s: {"root": path, "split": s} for s in SPLIT_NAMES}
        for single in ("trainval", "train"):
            if os.path.isfile(os.path.join(main, f"{single}.txt")):
                return {"all": {"root": path, "split": single}}
        return {"all": {"root": path}}
    if fmt == "coco":
        files = _coco_files(path)
        if "train" in files and "val" in files:
            return {s: {"ann_file": files[s][0], "img_dir": files[s][1]} for s in SPLIT_NAMES}
        if len(files) != 1:
            raise DataError(f"--data {path}: COCO files {', '.join(sorted(files)) or 'none'}: expected "
                            "annotations/instances_train.json and instances_val.json, or one file")
        ann, img_dir = next(iter(files.values()))
        return {"all": {"ann_file": ann, "img_dir": img_dir}}
    if fmt == "cvat":
        ann = _cvat_file(path)
        if ann is None:
            raise DataError(f"--data {path}: --format cvat needs annotations.xml in the folder")
        images = os.path.join(path, "images")
        return {"all": {"ann_file": ann, "img_dir": images if os.path.isdir(images) else path}}
    return {"all": {"ann_dir": path}}  # labelme
