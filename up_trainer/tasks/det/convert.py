"""``up data convert``: a detection set in one format written in another (COCO or YOLO).

The source is read by the same dataset the training would use (so it is validated the same
way, one line per problem); the target is written by the rules of its format:

- COCO: ``annotations/instances_<split>.json`` and ``images/<split>/``; boxes as
  ``[x, y, w, h]`` in pixels, exactly; ignore regions (VOC ``difficult``, COCO crowd) as
  ``iscrowd: 1``; per-object flags (VOC truncated/occluded/pose/difficult, CVAT occluded)
  in each annotation's ``attributes``, as CVAT's own COCO export does.
- YOLO: ``images/<split>/``, ``labels/<split>/<stem>.txt`` (``class cx cy w h`` normalized,
  written with full float precision) and ``data.yaml`` (no ``path``: the YAML's folder is the
  root for Ultralytics and for us). Ignore regions and per-object flags have no place in YOLO
  and are counted in the summary.

Images are linked (absolute symlinks), or copied with ``copy``; images that were embedded in
a LabelMe file are always copied. Every output name (images, labels, JSON, data.yaml) is
planned first: two sources on one name (``x.jpg`` and ``x.png`` both label ``x.txt``), a file
that exists already, an output in or around an input are refused in one line before anything
is written. The files are written in a temporary folder beside the output and moved into
place at the end (the folder renamed where the output is new): a failure leaves nothing.
"""
import json
import os
import shutil
import tempfile
from collections import Counter
from contextlib import contextmanager

from ...data.formats.common import Obj
from ...data.label_map import align, file_ids
from ...errors import ConfigError, DataError

SOURCES = ("voc", "yolo", "labelme", "cvat", "coco")
TARGETS = ("coco", "yolo")


# -- reading ------------------------------------------------------------------------------------------
def source_splits(fmt, input_path, images, splits):
    """{split: dataset kwargs} for the source; the splits the input holds when none are given."""
    if fmt == "yolo":
        from ...data.formats.yolo import read_data_yaml

        _, held, _ = read_data_yaml(input_path)
        return {s: {"data": input_path, "split": s} for s in (splits or list(held))}
    if fmt == "voc":
        if os.path.isdir(os.path.join(input_path, "Annotations")):
            main = os.path.join(input_path, "ImageSets", "Main")
            held = [s for s in ("train", "val", "test") if os.path.isfile(os.path.join(main, f"{s}.txt"))]
            if not held and os.path.isfile(os.path.join(main, "trainval.txt")):  # the union, only when alone
                held = ["trainval"]
            if splits or held:
                return {s: {"root": input_path, "split": s, "img_dir": images} for s in (splits or held)}
            return {"train": {"root": input_path, "img_dir": images}}
        return {one_split(splits): {"ann_dir": input_path, "img_dir": images}}
    split = one_split(splits)
    if fmt == "labelme":
        return {split: {"ann_dir": input_path, "img_dir": images}}
    if images is None:
        raise ConfigError("--images", f"required with --from {fmt} (the folder the image names are relative to)")
    return {split: {"ann_file": input_path, "img_dir": images}}


def one_split(splits):
    if len(splits) > 1:
        raise ConfigError("--split", "this source holds one split: give one --split (its name in the output)")
    return splits[0] if splits else "train"


def read_split(fmt, kwargs, classes):
    from ...registry import DATASETS

    if classes is not None:
        if fmt == "coco":
            raise ConfigError("--classes", "a COCO file names its own categories; --classes is for the other formats")
        kwargs = dict(kwargs, classes=classes)
    if fmt == "voc":
        kwargs = dict(kwargs, keep_difficult=False)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    ds = _build(DATASETS, fmt, kwargs)
    if fmt == "coco":  # coco records carry boxes, not parsed objects
        for rec in ds.records:
            rec["file_name"] = os.path.relpath(rec["file"], ds.img_dir or ".")
            rec["objects"] = [Obj(b, ds.classes[label - 1], rec["source"])
                              for b, label in zip(rec["boxes"], rec["labels"])]
            rec["objects"] += [Obj(b, None, rec["source"], ignore=True) for b in rec["ignore"]]
    return ds


def _build(datasets, fmt, kwargs):
    """The source dataset; its errors in convert's words: ``--classes`` for the classes the
    dataset calls ``kwargs.classes``, and no config option (on_bad_record) as the way out of
    a bad record: convert carries valid records only."""
    from ..det.datasets import BAD_RECORD_HINT

    try:
        return datasets.build({"type": fmt, "kwargs": kwargs})
    except ConfigError as exc:
        if str(exc.path or "").split(".")[-1] == "classes":
            raise ConfigError("--classes", exc.message, exc.hint) from None
        raise
    except DataError as exc:
        text, tail = str(exc), f" ({BAD_RECORD_HINT})"
        if text.endswith(tail):
            raise DataError(text[: -len(tail)] + " (fix or remove that record: up data convert carries valid "
                            "records only; up data check lists every such record)") from None
        raise


# -- where things go ----------------------------------------------------------------------------------
def image_target(out, split, rec):
    """out/images/<split>/<the source's relative name> (names that would climb out: the base name)."""
    name = os.path.normpath(rec["file_name"])
    if os.path.isabs(name) or name.split(os.sep)[0] == "..":
        name = os.path.basename(name)
    return os.path.join(out, "images", split, name)


def claim(taken, path, source, out):
    """Record that ``source`` writes ``path``; two sources on one output name are refused, in
    one line naming both, before anything is written (x.jpg and x.png both label x.txt)."""
    if path in taken:
        raise DataError(f"{source}: it and {taken[path]} would both be written as {os.path.relpath(path, out)}; "
                        "rename one of them")
    taken[path] = source


def check_out(out, inputs, planned):
    """Refuse an output in or around an input, and any file that exists already."""
    from ...paths import guard_output_dir

    # the one output guard: a directory we may write, neither in nor around an input (links followed)
    guard_output_dir(out, "--out", writes=(), apart_from=inputs)
    for path in planned:
        if os.path.lexists(path):
            raise ConfigError("--out", f"{path} exists already; convert never overwrites (give a new or empty folder)")


# -- writing ------------------------------------------------------------------------------------------
def place_image(src, dst, copy):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if copy:
        shutil.copyfile(src, dst)
    else:
        os.symlink(os.path.realpath(src), dst)  # the file itself: a chain of links breaks with any link


def coco_json(ds, split, placed, image_root, cat_ids, lost):
    images, anns = [], []
    for rec, target in placed:
        images.append({"id": rec["image_id"], "file_name": os.path.relpath(target, image_root),
                       "width": rec["width"], "height": rec["height"]})
        for obj in rec["objects"]:
            x1, y1, x2, y2 = obj.box
            if obj.name is None:
                lost["ignore regions without a class (COCO needs one)"] += 1
                continue
            ann = {"id": len(anns) + 1, "image_id": rec["image_id"], "category_id": cat_ids[obj.name],
                   "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": int(obj.ignore)}
            if obj.extra:
                ann["attributes"] = dict(obj.extra)
            anns.append(ann)
    cats = [{"id": cat_ids[n], "name": n} for n in ds.classes]
    return {"info": {"description": f"converted by up data convert ({split})"}, "images": images,
            "annotations": anns, "categories": cats}


def yolo_lines(rec, class_id, lost):
    w, h = rec["width"], rec["height"]
    lines = []
    for obj in rec["objects"]:
        if obj.ignore:
            lost["ignore regions (YOLO has none)"] += 1
            continue
        for key in obj.extra:
            if key not in ("segment", "shape_type"):
                lost[f"'{key}' flags (YOLO has no per-object flags)"] += 1
        x1, y1, x2, y2 = obj.box
        values = ((x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h)
        lines.append(" ".join([str(class_id[obj.name])] + [repr(float(v)) for v in values]) + "\n")
    return lines


def convert(src_fmt, dst_fmt, input_path, out, images=None, splits=(), classes=None, copy=False):
    """Convert; returns the summary lines."""
    if src_fmt not in SOURCES or dst_fmt not in TARGETS:
        raise ConfigError("--from" if src_fmt not in SOURCES else "--to", "unknown format")
    if not os.path.exists(input_path):
        raise DataError(f"--input: not found: {input_path}")
    sources = source_splits(src_fmt, input_path, images, list(splits))
    datasets = {split: read_split(src_fmt, kwargs, classes) for split, kwargs in sources.items()}
    first = next(iter(datasets))
    names = datasets[first].classes
    for split, ds in datasets.items():  # one label map: every split by name onto the first's (data/label_map.py)
        try:
            align(ds, names, f"split {first!r}", file_ids(datasets[first]),
                  getattr(datasets[first], "numbered_classes", False))
        except DataError as exc:
            raise DataError(f"{exc} (give --classes naming every class)") from None
    plan, taken = {}, {}  # every file written, planned and checked before the first is
    for split, ds in datasets.items():
        plan[split] = [(rec, image_target(out, split, rec)) for rec in ds.records]
        for rec, target in plan[split]:
            claim(taken, target, rec["source"], out)
            if dst_fmt == "yolo" and rec["objects"]:
                claim(taken, yolo_label(out, split, target), rec["source"], out)
        if dst_fmt == "coco":
            claim(taken, os.path.join(out, "annotations", f"instances_{split}.json"), f"split {split!r}", out)
    if dst_fmt == "yolo":
        claim(taken, os.path.join(out, "data.yaml"), "the class names", out)
    check_out(out, [input_path] + ([images] if images else []), list(taken))
    with staging(out) as stage:
        return write_all(datasets, plan, names, src_fmt, dst_fmt, out, stage, copy)


def write_all(datasets, plan, names, src_fmt, dst_fmt, out, stage, copy):
    """Write the planned files, each under ``stage(path)``; returns the summary lines."""
    lost, written, summary = Counter(), [], []
    for ds in datasets.values():
        for note in dict.fromkeys(ds.notes if hasattr(ds, "notes") else []):
            summary.append(f"source note: {note}")
    src_cat_ids = getattr(next(iter(datasets.values())), "cat_ids", None) if src_fmt == "coco" else None
    cat_ids = {n: (src_cat_ids[i] if src_cat_ids else i + 1) for i, n in enumerate(names)}
    if dst_fmt == "yolo" and src_cat_ids and src_cat_ids != list(range(1, len(names) + 1)):
        summary.append("category ids became class indices 0..C-1 in id order (names kept)")
    for split, ds in datasets.items():
        for rec, target in plan[split]:
            place_image(rec["file"], stage(target), copy or bool(rec.get("embedded")))
        if dst_fmt == "coco":
            path = os.path.join(out, "annotations", f"instances_{split}.json")
            os.makedirs(os.path.dirname(stage(path)), exist_ok=True)
            with open(stage(path), "x", encoding="utf-8") as f:
                json.dump(coco_json(ds, split, plan[split], os.path.join(out, "images", split), cat_ids, lost), f)
        else:
            class_id = {n: i for i, n in enumerate(names)}
            path = os.path.join(out, "labels", split)
            for rec, target in plan[split]:
                lines = yolo_lines(rec, class_id, lost)
                if lines:  # an image without objects gets no label file: a negative
                    label = stage(yolo_label(out, split, target))
                    os.makedirs(os.path.dirname(label), exist_ok=True)
                    with open(label, "x", encoding="utf-8") as f:
                        f.write("".join(lines))
        boxes = sum(len(r["objects"]) for r in ds.records)
        written.append(f"{split}: {len(ds.records)} images, {boxes} objects -> {path} "
                          f"(images {'copied' if copy else 'linked'} in {os.path.join(out, 'images', split)})")
    if dst_fmt == "yolo":
        import yaml

        with open(stage(os.path.join(out, "data.yaml")), "x", encoding="utf-8") as f:
            yaml.safe_dump({**{s: f"images/{s}" for s in datasets}, "names": dict(enumerate(names))}, f,
                           sort_keys=False)
    lost_lines = [f"not carried: {n} {what}" for what, n in sorted(lost.items())] or ["not carried: nothing"]
    return written + summary + lost_lines


@contextmanager
def staging(out):
    """Yields ``stage``: output path under ``out`` -> the same path in a temporary folder (in
    ``out`` where it exists, else beside it: one file system, so moving is renaming); on success
    the staged tree is moved into ``out`` (the folder renamed into place when ``out`` does not
    exist yet), on any failure removed: never a half-written output."""
    out = os.path.abspath(out)
    exists = os.path.isdir(out)
    if not exists:
        os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".up-convert-partial-", dir=out if exists else os.path.dirname(out))
    try:
        yield lambda path: os.path.join(tmp, os.path.relpath(path, out))
        if not exists:
            os.rename(tmp, out)
        else:
            _move_into(tmp, out)
    finally:
        if os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def _move_into(src, dst):
    """Every entry of ``src`` renamed into the existing folder ``dst`` (sub-folders merged;
    the plan made sure no file is there yet)."""
    for name in os.listdir(src):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if os.path.isdir(s) and not os.path.islink(s) and os.path.isdir(d):
            _move_into(s, d)
        else:
            os.rename(s, d)


def yolo_label(out, split, image_target_path):
    rel = os.path.relpath(image_target_path, os.path.join(out, "images", split))
    return os.path.splitext(os.path.join(out, "labels", split, rel))[0] + ".txt"
