"""`up train --data DIR` recognises each labelling tool's layout and reads its splits; a split
drawn for a one-split folder is seeded and stays what it was written as."""
import json
import os
import shutil

import pytest

from format_fixtures import digits_coco, write_cvat, write_labelme, write_voc, write_yolo
from up_trainer.data.detect_format import detect_format, split_kwargs
from up_trainer.data.split_list import draw_split
from up_trainer.errors import DataError
from up_trainer.oneline import resolve_data


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    return root, digits_coco(str(root), num_images=6, num_val_images=3)


def test_each_layout_is_detected_with_its_splits(sets):
    root, splits = sets
    train, val = splits["train"], splits["val"]
    voc = root / "voc"
    for split, (coco, img_dir, _) in splits.items():
        write_voc(coco, img_dir, str(voc), split)
    yolo_yaml = write_yolo({"train": train[:2], "val": val[:2]}, str(root / "yolo"))
    cvat = root / "cvat"
    cvat.mkdir()
    write_cvat(train[0], str(cvat / "annotations.xml"))
    labelme = write_labelme(train[0], train[1], str(root / "labelme"))
    coco = root / "coco"  # annotations/instances_<split>.json + images/<split>/, as digits_coco wrote it
    assert detect_format(str(voc)) == "voc" and set(split_kwargs("voc", str(voc))) == {"train", "val"}
    assert detect_format(yolo_yaml) == "yolo" and detect_format(str(root / "yolo")) == "yolo"
    assert split_kwargs("yolo", str(root / "yolo"))["val"] == {"data": yolo_yaml, "split": "val"}
    assert detect_format(str(cvat)) == "cvat" and list(split_kwargs("cvat", str(cvat))) == ["all"]
    assert detect_format(labelme) == "labelme"
    assert detect_format(str(coco)) == "coco"
    assert split_kwargs("coco", str(coco))["val"]["ann_file"] == val[2]


def test_the_classes_of_both_splits_are_one_list(sets, tmp_path):
    """VOC collects its class names from the files: a class in one split only keeps its label."""
    root, splits = sets
    train, val = splits["train"], splits["val"]
    only_val = {a["category_id"] for a in val[0]["annotations"]} - {a["category_id"] for a in train[0]["annotations"]}
    voc = tmp_path / "voc"
    for split, (coco, img_dir, _) in splits.items():
        write_voc(coco, img_dir, str(voc), split)
    fmt, entries, classes, written = resolve_data(str(voc), None, str(tmp_path / "split.json"), 0)
    names = {c["id"]: c["name"] for c in train[0]["categories"]}
    assert fmt == "voc" and written is None
    assert {names[i] for i in only_val} <= set(classes) and classes == sorted(classes)
    assert entries["train"]["kwargs"]["classes"] == entries["val"]["kwargs"]["classes"] == classes


def test_a_seeded_split_is_the_same_for_the_same_seed_and_kept_once_written(sets, tmp_path):
    root, splits = sets
    coco, img_dir, _ = splits["train"]
    folder = write_labelme(coco, img_dir, str(tmp_path / "lm"))
    split_file = tmp_path / "split.json"
    _, entries, _, written = resolve_data(folder, None, str(split_file), 7)
    again = resolve_data(folder, None, str(split_file), 7)[3]
    assert written == again and json.loads(written)["seed"] == 7
    assert entries["val"] == {"type": "split_list", "kwargs": {"dataset": {"type": "labelme", "kwargs": {
        "ann_dir": os.path.abspath(folder), "classes": entries["val"]["kwargs"]["dataset"]["kwargs"]["classes"]}},
        "list_file": str(split_file), "part": "val", "root": os.path.abspath(folder)}}
    split_file.write_text(written)
    assert resolve_data(folder, None, str(split_file), 8)[3] is None  # the written split is the run's
    records = [{"file": os.path.join(folder, f"{i}.png")} for i in range(10)]
    assert draw_split(records, folder, 1) != draw_split(records, folder, 2)


def test_an_image_gone_from_a_written_split_is_one_line(sets, tmp_path):
    root, splits = sets
    coco, img_dir, _ = splits["train"]
    folder = write_labelme(coco, img_dir, str(tmp_path / "lm"))
    split_file = tmp_path / "split.json"
    _, entries, _, written = resolve_data(folder, None, str(split_file), 0)
    split_file.write_text(written)
    gone = json.loads(written)["val"][0]
    os.remove(os.path.join(folder, os.path.splitext(gone)[0] + ".json"))
    from up_trainer.registry import DATASETS

    with pytest.raises(DataError, match="1 of the 1 val images are not in the data"):
        DATASETS.build(entries["val"], "dataset.test")
    shutil.rmtree(folder)
