"""Malformed VOC / YOLO / LabelMe / CVAT / CSV inputs: `up train` refuses each in one line
naming the file and the line or XML element, exit 2, before any training."""
import json
import os
import shutil

import pytest

from conftest import invoke
from format_fixtures import digits_coco, det_cfg, write_cvat, write_labelme, write_voc, write_yolo
from hostile_helpers import assert_one_line, write_yaml


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("formats"))
    splits = digits_coco(root, num_images=3, num_val_images=2)
    coco, img_dir, _ = splits["train"]
    return {"voc": write_voc(coco, img_dir, os.path.join(root, "voc"), "train"),
            "yolo": write_yolo({"train": (coco, img_dir)}, os.path.join(root, "yolo")),
            "labelme": write_labelme(coco, img_dir, os.path.join(root, "labelme")),
            "cvat": (write_cvat(coco, os.path.join(root, "annotations.xml")), img_dir)}


def copy_of(sets, name, tmp_path):
    src = sets[name] if name != "yolo" else os.path.dirname(sets[name])
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def train_on(tmp_path, dataset):
    cfg = write_yaml(tmp_path / "cfg.yaml", det_cfg(dataset))
    return invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run"])


def voc_entry(root):
    return {"type": "voc", "kwargs": {"root": str(root), "split": "train"}}


def edit(path, old, new, count=1):
    text = open(path).read()
    assert old in text, (old, path)
    with open(path, "w") as f:
        f.write(text.replace(old, new, count))


def test_voc_missing_image(sets, tmp_path):
    root = copy_of(sets, "voc", tmp_path)
    os.remove(root / "JPEGImages" / "000002.png")
    assert_one_line(train_on(tmp_path, voc_entry(root)), "000002.xml:3 <filename>", "image file not found")


def test_voc_bad_xml(sets, tmp_path):
    root = copy_of(sets, "voc", tmp_path)
    edit(root / "Annotations" / "000001.xml", "</size>", "</sizes>")
    assert_one_line(train_on(tmp_path, voc_entry(root)), "000001.xml:4: malformed XML: mismatched tag")


def test_voc_entities_are_refused(sets, tmp_path):
    root = copy_of(sets, "voc", tmp_path)
    path = root / "Annotations" / "000001.xml"
    lol = '<!DOCTYPE a [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
    path.write_text(lol + path.read_text().replace("<folder>VOC</folder>", "<folder>&b;</folder>"))
    assert_one_line(train_on(tmp_path, voc_entry(root)), "000001.xml:1: XML with a DOCTYPE or entity declaration")


def test_voc_box_with_x2_before_x1(sets, tmp_path):
    root = copy_of(sets, "voc", tmp_path)
    path = root / "Annotations" / "000003.xml"
    text = path.read_text()
    xmin = text.split("<xmin>")[1].split("<")[0]
    edit(path, f"<xmax>{text.split('<xmax>')[1].split('<')[0]}</xmax>", f"<xmax>{int(xmin) - 3}</xmax>")
    assert_one_line(train_on(tmp_path, voc_entry(root)), f"000003.xml:6 <object #1>: box [{int(xmin) - 1}.0, ",
                    f", {int(xmin) - 3}.0, ", "non-positive size")


def test_yolo_class_id_out_of_range_and_bad_line(sets, tmp_path):
    root = copy_of(sets, "yolo", tmp_path)
    labels = root / "labels" / "train" / "000002.txt"
    with open(labels, "a") as f:
        f.write("12 0.5 0.5 0.1 0.1\n")
    n = len(labels.read_text().splitlines())
    entry = {"type": "yolo", "kwargs": {"data": str(root / "data.yaml"), "split": "train"}}
    assert_one_line(train_on(tmp_path, entry), f"000002.txt:{n}: class id 12 is out of range (names has 10")
    labels.write_text("3 0.5 0.5 0.1\n")
    assert_one_line(train_on(tmp_path, entry), "000002.txt:1: expected 'class cx cy w h'")
    labels.write_text("3 0.5 0.5 -0.1 0.1\n")  # negative width: x2 < x1
    assert_one_line(train_on(tmp_path, entry), "000002.txt:1: box", "non-positive size")


def test_labelme_missing_image_and_bad_json(sets, tmp_path):
    root = copy_of(sets, "labelme", tmp_path)
    os.remove(root / "000001.png")
    entry = {"type": "labelme", "kwargs": {"ann_dir": str(root)}}
    assert_one_line(train_on(tmp_path, entry), "000001.json: image file not found")
    (root / "000001.json").write_text('{"shapes": [')
    assert_one_line(train_on(tmp_path, entry), "000001.json: malformed JSON")


def test_labelme_degenerate_polygon(sets, tmp_path):
    root = copy_of(sets, "labelme", tmp_path)
    data = json.loads((root / "000002.json").read_text())
    data["shapes"][0].update(shape_type="polygon", points=[[5, 5], [5, 9], [5, 12]])
    (root / "000002.json").write_text(json.dumps(data))
    result = train_on(tmp_path, {"type": "labelme", "kwargs": {"ann_dir": str(root)}})
    assert_one_line(result, "000002.json: shapes[0]: box", "non-positive size")


def test_cvat_box_with_x2_before_x1_and_missing_image(sets, tmp_path):
    ann, img_dir = sets["cvat"]
    path = tmp_path / "annotations.xml"
    text = open(ann).read()
    xtl = text.split('xtl="')[1].split('"')[0]
    path.write_text(text.replace('xbr="', f'xbr="{float(xtl) - 2}" old="', 1))
    entry = {"type": "cvat", "kwargs": {"ann_file": str(path), "img_dir": img_dir}}
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "<box" in t)
    assert_one_line(train_on(tmp_path, entry), f"annotations.xml:{line} <box>: box", "non-positive size")
    path.write_text(text)
    entry["kwargs"]["img_dir"] = str(tmp_path)
    assert_one_line(train_on(tmp_path, entry), "annotations.xml:5 <image>: image file not found")


def test_csv_label_out_of_range_and_missing_image(tmp_path):
    from PIL import Image

    from hostile_helpers import tiny_cfg

    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    (tmp_path / "list.csv").write_text("path,label\na.png,1\nb.png,4\n")
    cfg = tiny_cfg()
    cfg["dataset"]["train"] = {"type": "csv", "kwargs": {"csv_file": str(tmp_path / "list.csv"),
                                                         "classes": ["x", "y", "z"]}}
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert_one_line(result, "list.csv:3: label 4 is out of range for 3 classes")
    (tmp_path / "list.csv").write_text("path,label\na.png,y\nb.png,x\n")
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert_one_line(result, "list.csv:3: image not found")


def two_images_listed(folder, text):
    from PIL import Image

    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8)).save(folder / name)
    (folder / "list.csv").write_text(text)
    return str(folder / "list.csv")


def test_csv_one_image_under_two_labels(tmp_path):
    from hostile_helpers import tiny_cfg

    two_images_listed(tmp_path, "path,label\na.png,x\nb.png,y\n./a.png,z\n")
    cfg = tiny_cfg()
    cfg["dataset"]["train"] = {"type": "csv", "kwargs": {"csv_file": str(tmp_path / "list.csv")}}
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert_one_line(result, "list.csv:4: ./a.png is labelled 'z' here and 'x' at line 2")


def test_csv_repeated_line_is_read_once(tmp_path):
    from up_trainer.tasks.cls.csv_dataset import CsvClassification

    assert len(CsvClassification(two_images_listed(tmp_path, "path,label\na.png,x\nb.png,y\na.png,x\n"))) == 2


def test_convert_refuses_its_input_and_existing_files(tmp_path):
    root = str(tmp_path / "digits")
    coco, img_dir, ann = digits_coco(root, num_images=2, num_val_images=1)["train"]
    args = ["--from", "coco", "--input", ann, "--images", img_dir, "--to", "coco"]
    inside = invoke(["data", "convert", *args, "--out", os.path.join(img_dir, "conv")])
    assert_one_line(inside, "--out:", "lies in or around the input")
    assert invoke(["data", "convert", *args, "--out", tmp_path / "c"]).exit_code == 0
    before = (tmp_path / "c" / "annotations" / "instances_train.json").read_text()
    assert_one_line(invoke(["data", "convert", *args, "--out", tmp_path / "c"]), "000001.png exists already; convert never overwrites")
    assert (tmp_path / "c" / "annotations" / "instances_train.json").read_text() == before
    no_images = invoke(["data", "convert", "--from", "cvat", "--input", ann, "--to", "coco", "--out", tmp_path / "x"])
    assert_one_line(no_images, "--images: required with --from cvat")


def test_check_refuses_an_out_that_is_a_file_or_holds_a_link(tmp_path, sets):
    data = os.path.join(os.path.dirname(sets["yolo"]), "data.yaml")
    (tmp_path / "taken").write_text("mine")
    result = invoke(["data", "check", "--from", "yolo", "--input", data, "--out", tmp_path / "taken"])
    assert_one_line(result, "--out:")
    assert (tmp_path / "taken").read_text() == "mine"
    (tmp_path / "out").mkdir()
    os.symlink(tmp_path / "taken", tmp_path / "out" / "report.json")
    result = invoke(["data", "check", "--from", "yolo", "--input", data, "--out", tmp_path / "out"])
    assert_one_line(result, "report.json is not a regular file")
    assert (tmp_path / "taken").read_text() == "mine"


def test_check_refuses_generated_data_in_one_line(tmp_path):
    from conftest import REPO

    result = invoke(["data", "check", "--config", os.path.join(REPO, "configs", "det", "digits_fcos.yaml"),
                     "--out", tmp_path / "r"])
    assert_one_line(result, "dataset.train.type: 'digits_det' is not a detection dataset read from files")
