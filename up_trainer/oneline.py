"""``up train --data DIR``: a run with no YAML to write.

The config is built from a small-data recipe (``configs/det/small_data_<model>.yaml``): its
dataset section is replaced by the detected data (data/detect_format.py), ``num_classes`` set
from the data's classes, and --epochs / --imgsz / --batch written where the recipe keeps them.
The result is written to the run dir as ``train.yaml`` and the command that runs it with
``--config`` is printed, so the next step (editing YAML) starts from exactly what ran.

Where the recipes are: a wheel carries ``configs/`` as the package data ``up_trainer/recipes``
(setup.py maps it); a source checkout or an editable install reads the repository's
``configs/`` beside the package. One copy of each recipe either way, the one the docs quote.
"""
import glob
import os
import shlex

from .config.loader import load_file
from .errors import ConfigError, DataError, UserError
from .registry import DATASETS

# The recipe `--model` defaults to: on real photos it led after 3 and 6 epochs and was within
# 0.01 AP of FCOS after 12 (docs/detection/small_data.rst). Change it here and nowhere else.
RECOMMENDED_MODEL = "atss"
RECIPE_PATTERN = "small_data_{}.yaml"
# Dataset kwargs that say where the data is: never carried over from the recipe's dataset.
_LOCATION_KEYS = {"ann_file", "img_dir", "root", "split", "ann_dir", "data", "meta_file", "image_dir", "classes"}
# Formats whose class list is collected from the files (not declared): train and val must share it.
_COLLECTED_CLASSES = ("voc", "labelme", "cvat")


def recipe_dirs():
    """Folders that may hold the detection recipes, the installed package data first."""
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "recipes", "det"), os.path.join(os.path.dirname(here), "configs", "det")]


def recipe_models():
    """{model name: recipe file} of every small-data recipe found."""
    for folder in recipe_dirs():
        files = sorted(glob.glob(os.path.join(folder, RECIPE_PATTERN.format("*"))))
        if files:
            prefix, suffix = RECIPE_PATTERN.split("{}")
            return {os.path.basename(f)[len(prefix):-len(suffix)]: f for f in files}
    return {}


def recipe_file(model):
    models = recipe_models()
    if not models:
        raise UserError(f"no small-data recipes found (looked in {', '.join(recipe_dirs())}); reinstall up-trainer")
    if model not in models:
        raise ConfigError("--model", f"no recipe {model!r}", f"recipes: {', '.join(sorted(models))}")
    return models[model]


# -- the data ------------------------------------------------------------------------------------
def _read(fmt, kwargs):
    """The dataset of one split, read without transforms (class names, record list)."""
    return DATASETS.build({"type": fmt, "kwargs": kwargs}, "--data")


def resolve_data(data, fmt, split_file, seed, redraw=False):
    """(format, {"train": entry, "val": entry}, class names, split JSON to write or None).

    ``split_file``: where the seeded split of a one-split layout lives; an existing one (a run
    continued) is used as it is, so the run sees the images it started with."""
    import json

    from .data.detect_format import detect_format, split_kwargs
    from .data.split_list import draw_split

    data = os.path.abspath(data)
    fmt = fmt or detect_format(data)
    splits = split_kwargs(fmt, data)
    read = {name: _read(fmt, kw) for name, kw in splits.items()}
    classes = list(next(iter(read.values())).classes)
    if fmt in _COLLECTED_CLASSES:  # a class seen in one split only must keep one label in both
        classes = sorted({c for ds in read.values() for c in ds.classes})
        splits = {name: dict(kw, classes=classes) for name, kw in splits.items()}
    elif len({tuple(ds.classes) for ds in read.values()}) > 1:
        raise DataError(f"--data {data}: train and val declare different classes "
                        f"({read['train'].classes} / {read['val'].classes})")
    if "all" not in splits:
        return fmt, {"train": {"type": fmt, "kwargs": dict(splits["train"])},
                 "val": {"type": fmt, "kwargs": dict(splits["val"])}}, classes, None
    written = None
    if redraw or not os.path.isfile(split_file):
        written = json.dumps(draw_split(read["all"].records, data, seed), indent=1) + "\n"
    entries = {part: {"type": "split_list", "kwargs": {"dataset": {"type": fmt, "kwargs": dict(splits["all"])},
                                                       "list_file": split_file, "part": part, "root": data}}
               for part in ("train", "val")}
    return fmt, entries, classes, written


def _with_recipe_kwargs(entry, recipe_entry):
    """``entry`` with the recipe dataset's own kwargs (transforms, skip_empty, ...) that its
    type accepts; the recipe's location keys are dropped (they named the recipe's example)."""
    from .registry import public_params

    inner = entry["kwargs"]["dataset"] if entry["type"] == "split_list" else entry
    accepted = {name for name, _ in public_params(DATASETS.get(inner["type"]))}
    for key, value in ((recipe_entry or {}).get("kwargs") or {}).items():
        if key in accepted and key not in _LOCATION_KEYS:
            inner["kwargs"].setdefault(key, value)
    return entry


# -- the recipe's knobs --------------------------------------------------------------------------
def _entries(node):
    """Every {type, kwargs} mapping anywhere in ``node``."""
    if isinstance(node, dict):
        if isinstance(node.get("type"), str) and isinstance(node.get("kwargs"), dict):
            yield node
        for value in node.values():
            yield from _entries(value)
    elif isinstance(node, list):
        for value in node:
            yield from _entries(value)


def set_image_size(cfg, size):
    """The long side every resize of the recipe produces (train, test and hooks' pipelines),
    or the model's own resize where the recipe leaves resizing to the model (FCOS)."""
    found = 0
    for entry in _entries(cfg):
        if entry["type"] == "keep_ar_resize_max":
            entry["kwargs"]["max_size"] = size
            found += 1
    net = (cfg.get("net") or {}).get("kwargs") or {}
    for key in ("min_size", "max_size"):
        if key in net:
            net[key] = size
            found += 1
    if not found:
        raise ConfigError("--imgsz", "this recipe has no resize to set (no keep_ar_resize_max, no net min/max_size)")


def set_epochs(cfg, epochs):
    cfg.setdefault("trainer", {})["max_epoch"] = epochs
    kept = []
    for hook in cfg.get("hooks") or []:
        if isinstance(hook, dict) and hook.get("type") == "yolox_noaug":
            if epochs < 2:  # its last epochs without augmentation need a run of 2 epochs at least
                continue
            kwargs = hook.setdefault("kwargs", {})
            kwargs["max_epoch"] = epochs
            kwargs["no_aug_epoch"] = min(kwargs.get("no_aug_epoch", 2), epochs - 1)
        kept.append(hook)
    cfg["hooks"] = kept


def build_config(data, *, fmt=None, model=None, epochs=None, imgsz=None, batch=None, run_dir, seed=None,
                 redraw=False):
    """(config mapping, {file name: text} to write in the run dir, lines to print). ``redraw``:
    a new seeded split even when the run dir holds one (--fresh moves the old one aside)."""
    import yaml

    model = model or RECOMMENDED_MODEL
    recipe = recipe_file(model)
    cfg = load_file(recipe)
    run_seed = seed if seed is not None else (cfg.get("runtime") or {}).get("seed", 0)
    split_file = os.path.join(os.path.abspath(run_dir), "split.json")
    fmt, entries, classes, split_text = resolve_data(data, fmt, split_file, run_seed, redraw)
    recipe_ds = cfg.get("dataset") or {}
    cfg["dataset"] = dict(recipe_ds, train=_with_recipe_kwargs(entries["train"], recipe_ds.get("train")),
                          test=_with_recipe_kwargs(entries["val"], recipe_ds.get("test")))
    net = cfg.get("net")
    if isinstance(net, dict):
        net.setdefault("kwargs", {})["num_classes"] = len(classes)
    if epochs is not None:
        set_epochs(cfg, epochs)
    if imgsz is not None:
        set_image_size(cfg, imgsz)
    if batch is not None:
        cfg["dataset"]["batch_size"] = batch
    header = (f"# built by up train --data from {_shown(recipe)} (model {model}): data {os.path.abspath(data)}"
              f" ({fmt}), {len(classes)} classes: {', '.join(classes)}\n")
    files = {"train.yaml": header + yaml.safe_dump(cfg, sort_keys=False)}
    if split_text is not None:
        files["split.json"] = split_text
    split_note = "train/val from the layout" if entries["train"]["type"] != "split_list" else \
        f"train/val: the seeded split in {split_file}" + (" (kept)" if split_text is None else f" (seed {run_seed})")
    lines = [f"data: {fmt} at {os.path.abspath(data)}, {len(classes)} classes ({', '.join(classes)}); {split_note}",
             f"recipe: {_shown(recipe)} (model {model})"]
    return cfg, files, lines


def _shown(path):
    """A path relative to the current directory when it lies below it, else absolute."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def reproduce_command(run_dir, *, seed=None, device=None, opts=()):
    """The `up train --config` command that runs what the one-line form built."""
    argv = ["up", "train", "--config", os.path.join(run_dir, "train.yaml"), "--work-dir", run_dir]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if device is not None:
        argv += ["--device", device]
    for opt in opts:
        argv += ["--opts", opt]
    return shlex.join(argv)
