"""The small-data detection recipes on real photos: a 2-class Pascal VOC set built from two
public labelled photo sets, and every recipe trained on it for 3, 6 and 12 epochs.

The photos are not part of the project. Bring the two sets (both Pascal VOC: one XML per photo)
and point the script at their folders:

    raccoon:  github.com/datitran/raccoon_dataset   (images/, annotations/; 200 photos)
    kangaroo: github.com/experiencor/kangaroo       (images/, annots/; 164 photos)

    python benchmarks/real_photos.py build --raccoon PATH --kangaroo PATH --out data/photos
    python benchmarks/real_photos.py run --root data/photos --work runs/photos          # 9 runs
    python benchmarks/real_photos.py table --work runs/photos

``build`` copies the photos into one VOC root (``JPEGImages/``, ``Annotations/``,
``ImageSets/Main/{train,val}.txt``), each file name prefixed by its set, and splits each set
seeded (seed 0) into 80 % train and 20 % val, so both classes are in both splits. ``run``
trains each recipe (``configs/det/small_data_<name>.yaml``, its dataset section read from the
VOC root, ``num_classes`` 2) once per length with that length as ``trainer.max_epoch`` (the
LR schedule spans the whole run, so a 3-epoch run is not the first 3 epochs of a 12-epoch
one). ``table`` prints AP / AP50 of the last epoch's evaluation of each run as a
reStructuredText table.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import yaml

RECIPES = ("atss", "fcos", "yolox")
LENGTHS = (3, 6, 12)
SETS = {"raccoon": "annotations", "kangaroo": "annots"}


def config_path(name):
    return os.path.join(os.path.dirname(__file__), "..", "configs", "det", f"small_data_{name}.yaml")


def build(sources, out, seed=0, val_fraction=0.2):
    """One VOC root from the sets in ``sources`` ({set name: its folder}); returns the split sizes."""
    for sub in ("JPEGImages", "Annotations", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    split = {"train": [], "val": []}
    for name, folder in sorted(sources.items()):
        ann_dir = os.path.join(folder, SETS[name])
        ids = sorted(os.path.splitext(f)[0] for f in os.listdir(ann_dir) if f.endswith(".xml"))
        random.Random(seed).shuffle(ids)
        ids = [stem for stem in ids if readable(name, photo(folder, ann_dir, stem))]
        n_val = round(len(ids) * val_fraction)
        for i, stem in enumerate(ids):
            new_id = stem if stem.startswith(name) else f"{name}-{stem}"
            tree = ET.parse(os.path.join(ann_dir, stem + ".xml"))
            image = photo(folder, ann_dir, stem)
            ext = os.path.splitext(image)[1].lower()
            tree.find("filename").text = new_id + ext
            for obj in tree.iter("object"):  # one class per set
                obj.find("name").text = name
            shutil.copyfile(image, os.path.join(out, "JPEGImages", new_id + ext))
            tree.write(os.path.join(out, "Annotations", new_id + ".xml"))
            split["val" if i < n_val else "train"].append(new_id)
    for part, ids in split.items():
        with open(os.path.join(out, "ImageSets", "Main", f"{part}.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(sorted(ids)) + "\n")
    return {part: len(ids) for part, ids in split.items()}


def photo(folder, ann_dir, stem):
    """The photo an annotation file names (some name it by another extension)."""
    image = os.path.join(folder, "images", ET.parse(os.path.join(ann_dir, stem + ".xml")).findtext("filename"))
    return image if os.path.exists(image) else os.path.join(folder, "images", stem + ".jpg")


def readable(name, path):
    """Whether the photo decodes whole; a truncated one (the kangaroo set has one) is left out
    and named: training would stop on it, as it should."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            im.load()
        return True
    except (OSError, SyntaxError) as e:
        print(f"left out ({name}): {path}: {e}", file=sys.stderr)
        return False


def recipe_on_voc(name, root, epochs):
    """The recipe's config with its dataset section reading the VOC root and 2 classes."""
    with open(config_path(name), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    for part, split in (("train", "train"), ("test", "val")):
        kwargs = cfg["dataset"][part]["kwargs"]
        keep = {k: kwargs[k] for k in ("transforms", "skip_empty") if k in kwargs}
        cfg["dataset"][part] = {"type": "voc", "kwargs": {"root": os.path.abspath(root), "split": split,
                                                          "classes": ["kangaroo", "raccoon"], **keep}}
    cfg["net"]["kwargs"]["num_classes"] = 2
    cfg["trainer"]["max_epoch"] = epochs
    for hook in cfg.get("hooks", []):
        if hook["type"] == "yolox_noaug":  # the plain last epochs, counted back from this run's end
            hook["kwargs"].update(max_epoch=epochs, no_aug_epoch=max(1, epochs // 6))
    return cfg


def run(root, work, names, lengths, parallel, extra_opts):
    """Trains every (recipe, length) pair, ``parallel`` processes at a time."""
    os.makedirs(work, exist_ok=True)
    queue, running = [], []
    for name in names:
        for epochs in lengths:
            run_dir = os.path.join(work, f"{name}_e{epochs}")
            os.makedirs(run_dir, exist_ok=True)
            cfg_file = os.path.join(work, f"{name}_e{epochs}.yaml")
            with open(cfg_file, "w", encoding="utf-8") as f:
                yaml.safe_dump(recipe_on_voc(name, root, epochs), f, sort_keys=False)
            cmd = [sys.executable, "-m", "up_trainer", "train", "--config", cfg_file, "--work-dir", run_dir]
            if extra_opts:
                cmd += ["--opts", *extra_opts]
            queue.append((cmd, os.path.join(work, f"{name}_e{epochs}.out")))
    while queue or running:
        while queue and len(running) < parallel:
            cmd, out = queue.pop(0)
            running.append(subprocess.Popen(cmd, stdout=open(out, "w", encoding="utf-8"), stderr=subprocess.STDOUT))
        running[0].wait()
        running = [p for p in running if p.poll() is None]


def final_metrics(run_dir):
    """(AP, AP50, epoch, minutes) of the run's last evaluation, or None."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    evals = [r for r in rows if r.get("phase") == "eval"]
    if not evals:
        return None
    last = evals[-1]
    minutes = (last["time"] - rows[0]["time"]) / 60.0 if "time" in rows[0] else float("nan")
    return last["bbox.AP"], last["bbox.AP50"], last["epoch"], minutes


def table(work, names, lengths):
    head = ("recipe", *(f"{n} epochs: AP / AP50" for n in lengths))
    rows = []
    for name in names:
        cells = []
        for epochs in lengths:
            m = final_metrics(os.path.join(work, f"{name}_e{epochs}"))
            cells.append(f"{m[0]:.3f} / {m[1]:.3f}" if m and m[2] == epochs else "-")
        rows.append((name, *cells))
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(head, widths)), rule]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows] + [rule]
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--raccoon", required=True)
    b.add_argument("--kangaroo", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run")
    r.add_argument("--root", required=True)
    t = sub.add_parser("table")
    for q in (r, t):
        q.add_argument("--work", required=True)
        q.add_argument("--recipes", default=",".join(RECIPES))
        q.add_argument("--epochs", default=",".join(map(str, LENGTHS)))
    r.add_argument("--parallel", type=int, default=1, help="runs at the same time")
    r.add_argument("--opts", nargs="*", default=[], help="passed to every run (e.g. runtime.device=cuda)")
    a = p.parse_args()
    if a.cmd == "build":
        print(build({"raccoon": a.raccoon, "kangaroo": a.kangaroo}, a.out, a.seed))
        return
    names, lengths = a.recipes.split(","), [int(e) for e in re.split(r"[, ]+", a.epochs)]
    if a.cmd == "run":
        run(a.root, a.work, names, lengths, a.parallel, a.opts)
    table(a.work, names, lengths)


if __name__ == "__main__":
    main()
