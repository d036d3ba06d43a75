"""A written-down train/val split of a data set that holds one split only (a LabelMe folder, a
CVAT file, a VOC root without ImageSets): dataset type ``split_list``.

The split is drawn once, seeded, and written as JSON (``up train --data`` puts it in the run
dir as split.json), so a resumed or repeated run and ``up eval`` see the same images in each
part, whatever the seed of a later run. Images are named relative to the data folder.
"""
import json
import os
import random

from ..errors import ConfigError, DataError
from ..registry import DATASETS

VAL_FRACTION = 0.2


def record_key(record, root):
    """How the split file names one record's image: its path relative to the data folder."""
    if record.get("embedded"):  # a LabelMe image held inside its JSON: the JSON names it
        return os.path.relpath(str(record["source"]).split(":")[0], root)
    return os.path.relpath(os.path.abspath(record["file"]), os.path.abspath(root))


def draw_split(records, root, seed, val_fraction=VAL_FRACTION):
    """{"seed", "val_fraction", "train": [...], "val": [...]}: a seeded shuffle of the images,
    the first ``val_fraction`` of them (at least one) for validation."""
    keys = sorted({record_key(r, root) for r in records})
    if len(keys) < 2:
        raise DataError(f"{root}: {len(keys)} image(s): a train/val split needs at least 2")
    random.Random(seed).shuffle(keys)
    n_val = min(len(keys) - 1, max(1, round(len(keys) * val_fraction)))
    return {"seed": seed, "val_fraction": val_fraction, "train": sorted(keys[n_val:]), "val": sorted(keys[:n_val])}


def read_split(list_file, part):
    try:
        with open(list_file, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise DataError(f"split list {list_file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise DataError(f"split list {list_file}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get(part), list):
        raise DataError(f"split list {list_file}: no list of images under {part!r}")
    return set(map(str, data[part]))


@DATASETS.register("split_list")
def split_list(dataset: dict, list_file: str, part: str, root: str):
    """The records of ``dataset`` (a ``{type, kwargs}`` entry) whose image ``list_file`` (JSON)
    lists under ``part``; image names are relative to ``root`` (the data folder)."""
    if part not in ("train", "val"):
        raise ConfigError("part", f"expected train or val, got {part!r}")
    wanted = read_split(list_file, part)
    inner = DATASETS.build(dataset, "dataset")
    kept = [r for r in inner.records if record_key(r, root) in wanted]
    missing = len(wanted) - len({record_key(r, root) for r in kept})
    if missing:
        raise DataError(f"split list {list_file}: {missing} of the {len(wanted)} {part} images are not in the data "
                        f"under {root} any more (moved or removed?); start over with --fresh to draw a new split")
    inner.records = kept
    return inner
