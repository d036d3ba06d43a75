"""voc, yolo, labelme, cvat and csv datasets read sets written by each format's own rules
and give the records the coco dataset gives for the same scenes."""
import logging
import os

import numpy as np
import pytest
import torch

from format_fixtures import by_image, digits_coco, voc_ints, write_cvat, write_labelme, write_voc, write_yolo
from up_trainer.registry import DATASETS
from up_trainer.tasks.det.datasets import CocoDetection


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    return str(root), digits_coco(str(root))


def coco_targets(split_entry):
    coco, img_dir, ann = split_entry
    ds = CocoDetection(ann_file=ann, img_dir=img_dir)
    names = {img["id"]: img["file_name"] for img in coco["images"]}
    return ds, {names[r["image_id"]]: r for r in ds.records}


def assert_same_records(ds, expected, box_of=lambda box: box):
    """Every image of ``expected`` (file name -> coco record) with the same boxes (after
    ``box_of``, the format's rounding), labels and size; the pixels read equal."""
    got = {os.path.basename(r["file_name"]): r for r in ds.records}
    assert sorted(got) == sorted(expected)
    for name, ref in expected.items():
        rec = got[name]
        assert (rec["height"], rec["width"]) == (ref["height"], ref["width"])
        want = np.array([box_of(b) for b in ref["boxes"]], dtype=np.float64).reshape(-1, 4)
        order = np.lexsort(np.array(rec["boxes"]).reshape(-1, 4).T[::-1]) if rec["boxes"] else []
        ref_order = np.lexsort(want.T[::-1]) if len(want) else []
        np.testing.assert_allclose(np.array(rec["boxes"]).reshape(-1, 4)[order], want[ref_order], atol=1e-6)
        assert [rec["labels"][i] for i in order] == [ref["labels"][i] for i in ref_order]
    i = ds.records.index(got[name])
    sample = ds[i]
    assert sample["image"].shape[-2:] == (ref["height"], ref["width"])


def voc_rounded(box):
    xmin, ymin, xmax, ymax = voc_ints(box)
    return [xmin - 1, ymin - 1, xmax, ymax]


def test_voc_root_equals_coco_with_difficult_as_ignore(digits, caplog):
    root, splits = digits
    coco_ds, expected = coco_targets(splits["train"])
    coco = splits["train"][0]
    first = sorted(by_image(coco))[0]
    voc_root = write_voc(coco, splits["train"][1], os.path.join(root, "voc"), "train", difficult={(first, 0)})
    with caplog.at_level(logging.INFO, logger="up"):
        ds = DATASETS.build({"type": "voc", "kwargs": {"root": voc_root, "split": "train",
                                                       "classes": coco_ds.classes, "keep_difficult": True}})
    assert ds.classes == coco_ds.classes and ds.num_classes == 10
    assert_same_records(ds, expected, voc_rounded)
    assert any("voc" in r.message and "classes (given)" in r.message for r in caplog.records)
    # default: the difficult object is an ignore region, not a box; classes collected and sorted
    plain = DATASETS.build({"type": "voc", "kwargs": {"root": voc_root, "split": "train"}})
    rec = next(r for r in plain.records if r["file"].endswith(first))
    assert rec["ignore"] == [voc_rounded(by_image(coco)[first][1][0][0])]
    assert len(rec["boxes"]) == len(by_image(coco)[first][1]) - 1
    assert plain.classes == sorted({n for _, objs in by_image(coco).values() for _, n in objs})
    assert plain[0]["target"]["ignore_boxes"].shape[1] == 4
    # annotation folder + image folder, no ImageSets
    other = DATASETS.build({"type": "voc", "kwargs": {"ann_dir": os.path.join(voc_root, "Annotations"),
                                                      "img_dir": os.path.join(voc_root, "JPEGImages"),
                                                      "classes": coco_ds.classes, "keep_difficult": True}})
    assert_same_records(other, expected, voc_rounded)


def test_voc_box_rule_is_exact():
    from up_trainer.data.formats.voc import parse_voc  # noqa: F401  (the rule is in voc.py's docstring)

    # pixel columns 1..10 (1-based, inclusive) are the span 0..10 in continuous coordinates
    assert voc_rounded([0.0, 2.0, 10.0, 12.0]) == [0, 2, 10, 12]


@pytest.mark.parametrize("names_as_dict", [True, False])
def test_yolo_data_yaml_equals_coco_and_negatives(digits, names_as_dict, tmp_path):
    root, splits = digits
    coco_ds, expected = coco_targets(splits["val"])
    data = write_yolo({s: splits[s][:2] for s in ("train", "val")}, str(tmp_path / "yolo"), names_as_dict)
    ds = DATASETS.build({"type": "yolo", "kwargs": {"data": data, "split": "val"}})
    assert ds.classes == coco_ds.classes
    assert_same_records(ds, expected)
    # an image without a label file is a negative (kept, no boxes)
    negative = tmp_path / "yolo" / "images" / "val" / "zz_empty.png"
    negative.write_bytes(open(os.path.join(splits["val"][1], "000001.png"), "rb").read())
    ds = DATASETS.build({"type": "yolo", "kwargs": {"data": data, "split": "val"}})
    rec = next(r for r in ds.records if r["file"].endswith("zz_empty.png"))
    assert rec["boxes"] == [] and len(ds) == len(expected) + 1
    # Roboflow writes 'val: ../images/val' beside the folders; Ultralytics (and we) drop the '../'
    text = open(data).read().replace("val: images/val", "val: ../images/val")
    assert "../images/val" in text
    with open(data, "w") as f:
        f.write(text)
    assert len(DATASETS.build({"type": "yolo", "kwargs": {"data": data, "split": "val"}})) == len(expected) + 1


def test_labelme_rectangles_polygons_and_embedded_images(digits, tmp_path, caplog):
    root, splits = digits
    coco_ds, expected = coco_targets(splits["train"])
    coco = splits["train"][0]
    names = sorted(by_image(coco))
    folder = write_labelme(coco, splits["train"][1], str(tmp_path / "lm"), polygon={(names[1], 0)},
                           embed={names[2]})
    assert not os.path.exists(tmp_path / "lm" / names[2])
    os.mkdir(tmp_path / "lm" / "pics")  # a Windows path: imagePath "pics\\000004.png"
    os.rename(tmp_path / "lm" / names[3], tmp_path / "lm" / "pics" / names[3])
    windows = tmp_path / "lm" / names[3].replace(".png", ".json")
    text = windows.read_text().replace(f'"imagePath": "{names[3]}"', f'"imagePath": "pics\\\\{names[3]}"')
    windows.write_text(text)
    with caplog.at_level(logging.INFO, logger="up"):
        ds = DATASETS.build({"type": "labelme", "kwargs": {"ann_dir": folder, "classes": coco_ds.classes}})
    assert_same_records(ds, expected)
    assert any("1 polygon shape(s) became their bounding box" in r.message for r in caplog.records)
    embedded = next(i for i, r in enumerate(ds.records) if r["file"].endswith(names[2]))
    ref = coco_ds[next(i for i, r in enumerate(coco_ds.records) if r["file"].endswith(names[2]))]
    assert torch.equal(ds[embedded]["image"], ref["image"])


def test_cvat_boxes_occluded_kept_attributes_ignored(digits, tmp_path):
    root, splits = digits
    coco_ds, expected = coco_targets(splits["val"])
    coco = splits["val"][0]
    first = sorted(by_image(coco))[0]
    ann = write_cvat(coco, str(tmp_path / "annotations.xml"), occluded={(first, 0)})
    ds = DATASETS.build({"type": "cvat", "kwargs": {"ann_file": ann, "img_dir": splits["val"][1]}})
    assert ds.classes == coco_ds.classes  # the declared label list, in its order
    assert_same_records(ds, expected)
    rec = next(r for r in ds.records if r["file"].endswith(first))
    assert rec["objects"][0].extra == {"occluded": 1}


def test_csv_classification_names_ints_and_tsv(tmp_path):
    from PIL import Image

    for i in range(4):
        Image.fromarray(np.full((6, 5, 3), 40 * i, np.uint8)).save(tmp_path / f"im{i}.png")
    (tmp_path / "names.csv").write_text("path,label\nim0.png,cat\nim1.png,dog\nim2.png,cat\n")
    ds = DATASETS.build({"type": "csv", "kwargs": {"csv_file": str(tmp_path / "names.csv")}})
    assert ds.classes == ["cat", "dog"] and [r[1] for r in ds.records] == [0, 1, 0]
    s = ds[1]
    assert s["image"].shape == (3, 6, 5) and int(s["label"]) == 1 and s["image"].max() > 0
    (tmp_path / "ints.tsv").write_text("file\tclass\nim3.png\t2\nim0.png\t0\n")
    ds = DATASETS.build({"type": "csv", "kwargs": {"csv_file": str(tmp_path / "ints.tsv"), "path_column": "file",
                                                   "label_column": "class", "classes": ["a", "b", "c"]}})
    assert ds.num_classes == 3 and [r[1] for r in ds.records] == [2, 0]


def test_dry_run_trains_on_yolo(digits, tmp_path):
    from conftest import invoke, write_cfg
    from format_fixtures import det_cfg

    root, splits = digits
    data = write_yolo({s: splits[s][:2] for s in ("train", "val")}, str(tmp_path / "yolo"))
    cfg = det_cfg({"type": "yolo", "kwargs": {"data": data, "split": "train"}},
                  {"type": "yolo", "kwargs": {"data": data, "split": "val"}})
    result = invoke(["train", "--config", write_cfg(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run",
                     "--dry-run"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    log = "\n".join(p.read_text() for p in (tmp_path / "run").rglob("*.log"))
    coco_ds, expected = coco_targets(splits["train"])
    boxes = sum(len(r["boxes"]) for r in expected.values())
    empty = sum(1 for k in range(1, 11) if not any(k in r["labels"] for r in expected.values()))
    assert (f"dataset.train: {len(expected)} images (0 without boxes), {boxes} boxes, 0 ignore regions, "
            f"10 classes, without examples: {empty}") in log
    assert "yolo " in log and "10 classes (declared in the files): 0, 1, 2" in log  # the dataset's own line


@pytest.mark.slow  # five one-epoch runs: 99 s on 2 cores at load 10
def test_train_one_epoch_on_each_format_equals_coco(digits, tmp_path):
    """CVAT, YOLO (full precision) and LabelMe hold the scenes' boxes exactly: the same seed
    gives the same run as on COCO; VOC's whole-pixel boxes train too."""
    import csv

    from conftest import invoke
    from format_fixtures import det_cfg
    from conftest import write_cfg as write_yaml

    root, splits = digits
    (coco, img_dir, ann), (vcoco, vimg, vann) = splits["train"], splits["val"]
    cvat_train = write_cvat(coco, str(tmp_path / "train.xml"))
    cvat_val = write_cvat(vcoco, str(tmp_path / "val.xml"))
    voc_root = write_voc(coco, img_dir, str(tmp_path / "voc"), "train")
    data = write_yolo({"train": (coco, img_dir), "val": (vcoco, vimg)}, str(tmp_path / "yolo"))
    labelme_train = write_labelme(coco, img_dir, str(tmp_path / "lm_train"))
    labelme_val = write_labelme(vcoco, vimg, str(tmp_path / "lm_val"))
    digit_names = [str(i) for i in range(10)]
    runs = {"coco": ({"type": "coco", "kwargs": {"ann_file": ann, "img_dir": img_dir}},
                     {"type": "coco", "kwargs": {"ann_file": vann, "img_dir": vimg}}),
            "cvat": ({"type": "cvat", "kwargs": {"ann_file": cvat_train, "img_dir": img_dir}},
                     {"type": "cvat", "kwargs": {"ann_file": cvat_val, "img_dir": vimg}}),
            "voc": ({"type": "voc", "kwargs": {"root": voc_root, "split": "train",
                                               "classes": [str(i) for i in range(10)]}},
                    {"type": "coco", "kwargs": {"ann_file": vann, "img_dir": vimg}}),
            "yolo": ({"type": "yolo", "kwargs": {"data": data, "split": "train"}},
                     {"type": "yolo", "kwargs": {"data": data, "split": "val"}}),
            "labelme": ({"type": "labelme", "kwargs": {"ann_dir": labelme_train, "classes": digit_names}},
                        {"type": "labelme", "kwargs": {"ann_dir": labelme_val, "classes": digit_names}})}
    metrics = {}
    for name, (train, test) in runs.items():
        cfg = write_yaml(tmp_path / f"{name}.yaml", det_cfg(train, test))
        result = invoke(["train", "--config", cfg, "--work-dir", tmp_path / name])
        assert result.exit_code == 0, (name, result.stderr, result.exception)
        with open(tmp_path / name / "metrics.csv") as f:
            metrics[name] = list(csv.DictReader(f))
        assert metrics[name] and any("AP" in key for key in metrics[name][-1])

    def numbers(rows):
        return [{k: v for k, v in row.items() if "time" not in k and "speed" not in k and v} for row in rows]
    for name in ("cvat", "yolo", "labelme"):  # the same boxes: the same run, to the digits metrics.csv keeps
        assert numbers(metrics[name]) == numbers(metrics["coco"]), name
    assert numbers(metrics["voc"]) != numbers(metrics["coco"])  # whole-pixel boxes: another run


# -- up data convert ---------------------------------------------------------------------------------
def convert(*args):
    from conftest import invoke

    return invoke(["data", "convert", *args])


def test_convert_coco_to_yolo_to_coco_round_trip(digits, tmp_path):
    import json

    root, splits = digits
    coco, img_dir, ann = splits["train"]
    res = convert("--from", "coco", "--input", ann, "--images", img_dir, "--to", "yolo", "--out", tmp_path / "y")
    assert res.exit_code == 0, res.stderr
    assert "not carried: nothing" in res.stdout
    assert os.path.islink(tmp_path / "y" / "images" / "train" / "000001.png")
    res = convert("--from", "yolo", "--input", tmp_path / "y" / "data.yaml", "--to", "coco", "--out", tmp_path / "c",
                  "--copy")
    assert res.exit_code == 0, res.stderr
    back = json.loads((tmp_path / "c" / "annotations" / "instances_train.json").read_text())
    assert not os.path.islink(tmp_path / "c" / "images" / "train" / "000001.png")
    assert back["categories"] == [{"id": c["id"], "name": c["name"]} for c in coco["categories"]]
    a, b = by_image(coco), by_image(back)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name][0]["width"] == b[name][0]["width"] and [n for _, n in a[name][1]] == [n for _, n in b[name][1]]
        np.testing.assert_allclose([box for box, _ in b[name][1]], [box for box, _ in a[name][1]], atol=1e-6)


def test_convert_voc_to_coco_keeps_flags_and_difficult_as_crowd(digits, tmp_path):
    import json

    root, splits = digits
    coco, img_dir, _ = splits["val"]
    first = sorted(by_image(coco))[0]
    voc_root = write_voc(coco, img_dir, str(tmp_path / "voc"), "val", difficult={(first, 0)})
    res = convert("--from", "voc", "--input", voc_root, "--to", "coco", "--out", tmp_path / "out")
    assert res.exit_code == 0, res.stderr
    out = json.loads((tmp_path / "out" / "annotations" / "instances_val.json").read_text())
    crowd = [a for a in out["annotations"] if a["iscrowd"]]
    assert len(crowd) == 1 and crowd[0]["attributes"] == {"truncated": 0, "difficult": 1, "pose": "Unspecified"}
    box = by_image(coco)[first][1][0][0]
    np.testing.assert_allclose(crowd[0]["bbox"][:2], voc_rounded(box)[:2])
    # to YOLO the ignore region and the flags cannot go: the summary says so
    res = convert("--from", "voc", "--input", voc_root, "--to", "yolo", "--out", tmp_path / "y")
    assert res.exit_code == 0, res.stderr
    assert "not carried: 1 ignore regions (YOLO has none)" in res.stdout
    assert "'truncated' flags (YOLO has no per-object flags)" in res.stdout


def test_convert_labelme_polygons_note_and_embedded_images_copied(digits, tmp_path):
    root, splits = digits
    coco, img_dir, _ = splits["train"]
    names = sorted(by_image(coco))
    folder = write_labelme(coco, img_dir, str(tmp_path / "lm"), polygon={(names[0], 0)}, embed={names[1]})
    res = convert("--from", "labelme", "--input", folder, "--to", "yolo", "--out", tmp_path / "y")
    assert res.exit_code == 0, res.stderr
    assert "source note: 1 polygon shape(s) became their bounding box" in res.stdout
    embedded = tmp_path / "y" / "images" / "train" / names[1]
    assert embedded.is_file() and not embedded.is_symlink()
    present = sorted({n for _, objs in by_image(coco).values() for _, n in objs})  # LabelMe declares no list
    assert DATASETS.build({"type": "yolo", "kwargs": {"data": str(tmp_path / "y" / "data.yaml")}}).classes == present

