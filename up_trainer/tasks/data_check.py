"""``up data check``: a health report of a detection data set before a run spends a day on it.

Reads every annotation and every image's bytes (for the train/val identity hash), decodes
the pixels only with ``decode``, and reports per split: images and boxes per class, box sizes
at the input size the config trains at, boxes outside or on the image border, degenerate and
duplicate boxes, images listed twice, the same image in train and val, unreadable images,
empty classes and classes present in val but not in train, and whether val maps onto train's
classes the way ``up train`` maps it (by name; COCO: by id and name). Problems are ``error`` (the run
would be wrong: ``--strict`` exits 2 on them) or ``warning``.

Bad records that the dataset would refuse (a box outside its image, an unknown class) are
collected here with ``on_bad_record: skip`` instead of stopping at the first one.
"""
import hashlib
import inspect
import os
from collections import Counter

import numpy as np

from ..atomic import write_json
from ..data.label_map import align, file_ids, source_of
from ..errors import ConfigError, DataError
from ..registry import DATASETS

SPLIT_KEYS = (("train", "train"), ("test", "val"))  # config key -> the split's name in the report
TINY_SIDE = 1.0            # px in the file: a box thinner than this is degenerate
DUPLICATE_IOU = 0.95       # two boxes of one class over the same object
FINEST_STRIDE = 8          # px at the training size: below this most detectors see the box in no cell


def build_split(entry, path, context=None):
    """The dataset of one config entry, bad records skipped (and kept) rather than raised;
    it decodes under ``context`` (a DataContext: the run's pixel limit) when given."""
    if not isinstance(entry, dict) or "type" not in entry:
        raise ConfigError(path, "expected a dataset entry {type, kwargs}")
    cls = DATASETS.get(entry["type"], f"{path}.type")
    kwargs = dict(entry.get("kwargs") or {})
    if "on_bad_record" in inspect.signature(cls).parameters:
        kwargs["on_bad_record"] = "skip"
    ds = DATASETS.build({"type": entry["type"], "kwargs": kwargs}, path)
    if context is not None and hasattr(ds, "use_context"):
        ds.use_context(context)
    records = getattr(ds, "records", None)
    if not records or not isinstance(records[0], dict) or not {"file", "boxes"} <= set(records[0]):
        raise ConfigError(f"{path}.type", f"{entry['type']!r} is not a detection dataset read from files; "
                          "up data check reads detection sets (coco, custom, voc, yolo, labelme, cvat)")
    return ds


def train_scale(net_cfg):
    """(function (h, w) -> scale, description): the resize the detector applies at input."""
    kwargs = (net_cfg or {}).get("kwargs") if isinstance(net_cfg, dict) else None
    if isinstance(kwargs, dict) and "min_size" in kwargs:
        lo, hi = kwargs["min_size"], kwargs.get("max_size", 1333)
        lo = min(lo) if isinstance(lo, (list, tuple)) else lo
        return (lambda h, w: min(lo / min(h, w), hi / max(h, w))), f"min_size {lo}, max_size {hi}"
    return (lambda h, w: 1.0), "file size (the config's net names no min_size)"


def pipeline_scale(ds):
    """(function (h, w) -> scale, description) of the keep-ratio resize in a dataset's pipeline
    (keep_ar_resize_max and its UP spellings), or None when it resizes nothing. Several scales
    (multi-scale training): the smallest, where small boxes are smallest."""
    from .det.pipeline import pipeline_ops
    from .det.transforms import KeepRatioResize

    op = next((o for o in pipeline_ops(getattr(ds, "transform", None)) if isinstance(o, KeepRatioResize)), None)
    if op is None:
        return None
    if op.scales is not None:
        lo = min(op.scales)
        return (lambda h, w: min(lo / min(h, w), op.max_size / max(h, w))), f"short side {lo}, long side <= {op.max_size}"
    side = op.random_size[0] * op.scale_step if op.random_size is not None else op.max_size
    return (lambda h, w: side / max(h, w)), f"long side {side}"


def input_scale(ds, net_cfg):
    """The scale boxes have at the model's input: the dataset's resize, then the net's own."""
    piped, (net_fn, net_text) = pipeline_scale(ds), train_scale(net_cfg)
    if piped is None:
        return net_fn, net_text
    pipe_fn, pipe_text = piped
    if net_text.startswith("file size"):
        return pipe_fn, pipe_text
    return (lambda h, w: pipe_fn(h, w) * net_fn(h * pipe_fn(h, w), w * pipe_fn(h, w))), f"{pipe_text}, then {net_text}"


def file_hash(path):
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def iou_matrix(boxes):
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    x1, y1 = np.maximum(b[:, None, 0], b[None, :, 0]), np.maximum(b[:, None, 1], b[None, :, 1])
    x2, y2 = np.minimum(b[:, None, 2], b[None, :, 2]), np.minimum(b[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area[:, None] + area[None, :] - inter, 1e-9)


class Report:
    def __init__(self):
        self.findings = []

    def add(self, level, check, split, message, count=1):
        self.findings.append({"level": level, "check": check, "split": split, "count": count, "message": message})

    def errors(self):
        return [f for f in self.findings if f["level"] == "error"]


def split_stats(name, ds, scale, report, decode):
    """Counts, box sizes and per-split problems of one dataset; returns its summary dict."""
    classes = list(ds.classes)
    per_class_boxes, per_class_images = Counter(), Counter()
    sizes, border, tiny, duplicates, listed = [], 0, 0, 0, Counter()
    for rec in ds.records:
        listed[os.path.realpath(rec["file"])] += 1
        h, w = rec["height"], rec["width"]
        s = scale(h, w)
        for label in set(rec["labels"]):
            per_class_images[classes[label - 1]] += 1
        for box, label in zip(rec["boxes"], rec["labels"]):
            per_class_boxes[classes[label - 1]] += 1
            bw, bh = box[2] - box[0], box[3] - box[1]
            sizes.append((bw * s, bh * s))
            tiny += bw < TINY_SIDE or bh < TINY_SIDE
            border += box[0] <= 0 or box[1] <= 0 or box[2] >= w or box[3] >= h
        if len(rec["boxes"]) > 1:
            iou, labels = iou_matrix(rec["boxes"]), np.asarray(rec["labels"])
            same = np.triu((iou > DUPLICATE_IOU) & (labels[:, None] == labels[None, :]), k=1)
            duplicates += int(same.sum())
    for message in getattr(ds, "skipped", []):
        report.add("error", "bad record", name, message)
    twice = {f: n for f, n in listed.items() if n > 1}
    if twice:
        report.add("warning", "listed twice", name, f"{len(twice)} image file(s) listed more than once, e.g. "
                   f"{next(iter(twice))}", len(twice))
    if border:
        report.add("warning", "on the border", name, f"{border} box(es) touch or were clipped to the image border",
                   border)
    if tiny:
        report.add("warning", "degenerate", name, f"{tiny} box(es) thinner than {TINY_SIDE:g} px", tiny)
    if duplicates:
        report.add("warning", "duplicate boxes", name, f"{duplicates} pair(s) of same-class boxes with IoU > "
                   f"{DUPLICATE_IOU}", duplicates)
    sides = np.sqrt(np.prod(np.asarray(sizes).reshape(-1, 2), axis=1)) if sizes else np.zeros(0)
    small = int((sides < FINEST_STRIDE).sum())
    if small:
        report.add("warning", "small boxes", name, f"{small} of {len(sides)} box(es) are under {FINEST_STRIDE} px "
                   "(sqrt of area) at the training size: finer than most detectors' finest stride", small)
    if decode:
        unreadable = 0
        for rec in ds.records:
            try:
                ds._image(rec)
            except DataError as exc:
                unreadable += 1
                report.add("error", "unreadable", name, str(exc))
        if unreadable == 0:
            report.add("info", "decode", name, f"all {len(ds.records)} images decode")
    return {"images": len(ds.records), "boxes": int(sum(per_class_boxes.values())),
            "images_without_boxes": sum(1 for r in ds.records if not r["boxes"]),
            "ignore_regions": sum(len(r.get("ignore", [])) for r in ds.records),
            "boxes_per_class": {c: per_class_boxes[c] for c in classes},
            "images_per_class": {c: per_class_images[c] for c in classes},
            "box_sizes": [list(map(float, wh)) for wh in sizes],
            "skipped_records": len(getattr(ds, "skipped", []))}


def cross_split(datasets, summary, report):
    """Empty classes, classes in val only, and the same image file content in train and val."""
    if "train" not in datasets:
        return
    train = summary["train"]["boxes_per_class"]
    empty = [c for c, n in train.items() if n == 0]
    if empty:
        report.add("error", "empty class", "train", f"{len(empty)} class(es) have no train box: "
                   f"{', '.join(empty[:10])}", len(empty))
    hashes = {}
    for rec in datasets["train"].records:
        hashes.setdefault(file_hash(rec["file"]), rec["file"])
    for name, ds in datasets.items():
        if name == "train":
            continue
        only = [c for c, n in summary[name]["boxes_per_class"].items() if n and not train.get(c)]
        if only:
            report.add("error", "class not in train", name, f"class(es) with {name} boxes but none in train: "
                       f"{', '.join(only[:10])}", len(only))
        try:  # as up train maps it: by class name (COCO: id and name) onto the train set's classes
            train_set = datasets["train"]
            align(ds, list(train_set.classes), f"train ({source_of(train_set)})", file_ids(train_set),
                  getattr(train_set, "numbered_classes", False))
        except DataError as exc:
            report.add("error", "label map", name, str(exc))
        shared = [(rec["file"], hashes[h]) for rec in ds.records if (h := file_hash(rec["file"])) in hashes]
        if shared:
            report.add("error", "train/val overlap", name, f"{len(shared)} {name} image(s) have the same bytes as a "
                       f"train image, e.g. {shared[0][0]} = {shared[0][1]}", len(shared))


def check_data(datasets, scale_info, out_dir, decode=False, seed=0):
    """Run every check on {split: dataset}; writes report.json and the PNGs under ``out_dir``;
    returns (report, summary, written files)."""
    from .data_check_plots import write_plots

    scale, scale_text = scale_info
    report, summary = Report(), {}
    for name, ds in datasets.items():
        summary[name] = split_stats(name, ds, scale, report, decode)
    cross_split(datasets, summary, report)
    os.makedirs(out_dir, exist_ok=True)
    files = write_plots(datasets, summary, scale_text, out_dir, seed, report)
    doc = {"input_size": scale_text, "splits": {k: {x: v for x, v in s.items() if x != "box_sizes"}
                                                for k, s in summary.items()},
           "findings": report.findings, "files": [os.path.basename(f) for f in files]}
    path = os.path.join(out_dir, "report.json")
    write_json(path, doc, indent=1)
    return report, summary, files + [path]


def terminal_lines(report, summary, scale_text):
    lines = [f"box sizes at the training input size ({scale_text})"]
    for name, s in summary.items():
        lines.append(f"{name}: {s['images']} images ({s['images_without_boxes']} without boxes), {s['boxes']} boxes, "
                     f"{s['ignore_regions']} ignore regions, {s['skipped_records']} bad record(s)")
        counts = ", ".join(f"{c}: {n}" for c, n in s["boxes_per_class"].items())
        lines.append(f"  boxes per class: {counts}")
        if s["box_sizes"]:
            sides = np.sqrt(np.prod(np.asarray(s["box_sizes"]), axis=1))
            lo, med, hi = np.percentile(sides, [5, 50, 95])
            lines.append(f"  box side (sqrt area, px at training size): 5% {lo:.1f}, median {med:.1f}, 95% {hi:.1f}")
    for f in report.findings:
        lines.append(f"{f['level']}: [{f['split']}] {f['check']}: {f['message']}")
    errors, warnings = len(report.errors()), sum(f["level"] == "warning" for f in report.findings)
    lines.append(f"{errors} error(s), {warnings} warning(s)")
    return lines


OUTPUT_NAMES = ("report.json", "counts.png", "box_sizes.png", "train_samples.png")


def config_entries(cfg):
    """{split name: dataset entry} of a resolved config (train, and test as val)."""
    from ..registry import import_user_modules

    import_user_modules((cfg.get("runtime") or {}).get("imports"))
    data = cfg.get("dataset") or {}
    entries = {name: data[key] for key, name in SPLIT_KEYS if isinstance(data.get(key), dict)}
    if not entries:
        raise ConfigError("dataset", "no train or test dataset to check")
    return entries


def format_entries(fmt, input_path, images, splits):
    from .det.convert import source_splits

    if fmt is None or input_path is None:
        raise ConfigError("--config", "give --config, or --from and --input")
    if not os.path.exists(input_path):
        raise DataError(f"--input: not found: {input_path}")
    return {split: {"type": fmt, "kwargs": {k: v for k, v in kwargs.items() if v is not None}}
            for split, kwargs in source_splits(fmt, input_path, images, list(splits)).items()}


def check_out_dir(out_dir, entries):
    """The one output guard (a writable directory, none of the input files under the names
    written), and no link under those names: a rerun replaces its own files, nothing else."""
    from ..paths import guard_output_dir

    inputs = [v for entry in entries.values() for v in (entry.get("kwargs") or {}).values()
              if isinstance(v, str) and os.path.isfile(v)]
    guard_output_dir(out_dir, "--out", inputs=inputs, writes=OUTPUT_NAMES)
    for name in OUTPUT_NAMES:
        path = os.path.join(out_dir, name)
        if os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path)):
            raise ConfigError("--out", f"{path} is not a regular file; the check writes {name} there")


def run_check(cfg, fmt, input_path, images, splits, out_dir, decode=False, seed=0):
    """(terminal lines, error findings) for a config's data sets or a data path + format."""
    entries = config_entries(cfg) if cfg is not None else format_entries(fmt, input_path, images, splits)
    check_out_dir(out_dir, entries)
    from ..data.context import DEFAULT_MAX_PIXELS, DataContext

    # the run's own decoder limit: an image it would refuse is a finding here
    limit = (cfg.get("runtime") or {}).get("max_image_pixels", DEFAULT_MAX_PIXELS) if cfg is not None \
        else DEFAULT_MAX_PIXELS
    context = DataContext(max_pixels=limit)
    prefix = "dataset." if cfg is not None else ""
    keys = {name: key for key, name in SPLIT_KEYS}
    datasets = {name: build_split(entry, f"{prefix}{keys.get(name, name)}", context)
                for name, entry in entries.items()}
    first = datasets.get("train") or next(iter(datasets.values()))
    scale_info = input_scale(first, cfg.get("net")) if cfg is not None else train_scale(None)
    report, summary, files = check_data(datasets, scale_info, out_dir, decode, seed)
    lines = terminal_lines(report, summary, scale_info[1]) + [f"written: {', '.join(files)}"]
    return lines, report.errors()


# -- the start-up line of up train ----------------------------------------------------------------------
def summary_line(ds, path):
    """One line on a dataset's annotations for train.log (no image read, no file hashed):
    counts, classes without any example, records skipped as bad, boxes on the border. None
    for datasets that generate their samples (nothing on disk to go wrong)."""
    if getattr(ds, "generates_samples", False):
        return None
    records = getattr(ds, "records", None)
    classes = list(getattr(ds, "classes", None) or [])
    if records and isinstance(records[0], dict) and "boxes" in records[0]:
        # One pass: packed records are unpickled on every read (a COCO-sized index costs
        # about a second a pass).
        per_class, border, without_boxes, ignore = Counter(), 0, 0, 0
        for r in records:
            per_class.update(r["labels"])
            width, height = r["width"], r["height"]
            border += sum(b[0] <= 0 or b[1] <= 0 or b[2] >= width or b[3] >= height for b in r["boxes"])
            without_boxes += not r["boxes"]
            ignore += len(r.get("ignore", []))
        text = (f"{len(records)} images ({without_boxes} without boxes), "
                f"{sum(per_class.values())} boxes, {ignore} ignore regions")
        tail = f", {border} boxes touching the image border"
    elif hasattr(ds, "image_classes") and records:
        per_class = Counter(label + 1 for labels in ds.image_classes() for label in labels)  # 0-based -> 1..C
        text, tail = f"{len(records)} images", ""
    else:
        return None
    empty = [name for k, name in enumerate(classes, 1) if not per_class.get(k)]
    shown = ", ".join(empty[:5]) + (", ..." if len(empty) > 5 else "")
    return (f"{path}: {text}, {len(classes)} classes, without examples: {len(empty)}{f' ({shown})' if empty else ''}, "
            f"bad records skipped: {len(getattr(ds, 'skipped', []))}{tail} (up data check for the full report)")
