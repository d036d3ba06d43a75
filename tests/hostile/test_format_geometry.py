"""Label files whose geometry or bytes the readers used to take wrongly: CVAT rotated boxes
(read unrotated), EXIF-rotated photos in a YOLO set (refused, with a hint naming an option the
format lacks), YOLO label files that are not UTF-8 (no file named) and one CSV image under
two spellings of its path (both labels accepted)."""
import json
import math
import os
import re
import shutil

import pytest

from conftest import invoke
from format_fixtures import det_cfg, digits_coco, write_cvat, write_voc
from hostile_helpers import assert_one_line, write_yaml


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("geometry"))
    return digits_coco(root, num_images=3, num_val_images=1)["train"]


def enclosing(box, degrees, width, height):
    """The axis-aligned box around ``box`` turned about its centre, cut to the image."""
    x1, y1, x2, y2 = box
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    corners = [(x, y) for x in (x1, x2) for y in (y1, y2)]
    a = math.radians(degrees)
    turned = [(cx + (x - cx) * math.cos(a) - (y - cy) * math.sin(a),
               cy + (x - cx) * math.sin(a) + (y - cy) * math.cos(a)) for x, y in corners]
    xs, ys = [p[0] for p in turned], [p[1] for p in turned]
    return [max(min(xs), 0), max(min(ys), 0), min(max(xs), width), min(max(ys), height)]


def test_cvat_rotated_box_becomes_its_enclosing_box(digits, tmp_path):
    coco, img_dir, _ = digits
    (tmp_path / "ann").mkdir()
    path = write_cvat(coco, str(tmp_path / "ann" / "annotations.xml"))
    text = open(path).read()
    first = re.search(r'<image id="0" name="([^"]+)" width="(\d+)" height="(\d+)">\s*<box label="([^"]+)" '
                      r'source="manual" occluded="0" xtl="([^"]+)" ytl="([^"]+)" xbr="([^"]+)" ybr="([^"]+)"', text)
    name, width, height = first.group(1), int(first.group(2)), int(first.group(3))
    box = [float(first.group(k)) for k in (5, 6, 7, 8)]
    with open(path, "w") as f:
        f.write(text.replace('z_order="0"', 'z_order="0" rotation="30.0"', 1))
    result = invoke(["data", "convert", "--from", "cvat", "--input", path, "--images", img_dir, "--to", "coco",
                     "--out", tmp_path / "out"])
    assert result.exit_code == 0, result.stderr
    assert "1 rotated box(es) became their enclosing axis-aligned box" in result.stdout + result.stderr
    out = json.loads((tmp_path / "out" / "annotations" / "instances_train.json").read_text())
    image_id = next(i["id"] for i in out["images"] if i["file_name"] == name)
    ann = next(a for a in out["annotations"] if a["image_id"] == image_id)
    x, y, w, h = ann["bbox"]
    assert [x, y, x + w, y + h] == pytest.approx(enclosing(box, 30.0, width, height))
    assert ann["attributes"]["rotation"] == 30.0
    assert w > box[2] - box[0] and h > box[3] - box[1]  # grown, not the unrotated box


def exif_rotated_png(path, stored_size, orientation=6):
    """A PNG whose pixels are stored sideways with an EXIF orientation turning them upright."""
    from PIL import Image

    img = Image.new("RGB", stored_size, (40, 40, 40))
    img.paste((250, 250, 250), (4, 4, 20, 12))
    exif = Image.Exif()
    exif[0x0112] = orientation
    img.save(path, exif=exif.tobytes())


def test_exif_rotated_photos_in_a_yolo_set_train(tmp_path):
    """Phone photos stored sideways: decoding turns them upright (as Ultralytics labels them),
    so their size is the upright one; they used to be refused with a hint to set
    exif_transpose, an option the yolo dataset does not have."""
    for split in ("train",):
        (tmp_path / "images" / split).mkdir(parents=True)
        (tmp_path / "labels" / split).mkdir(parents=True)
    for k in range(2):
        exif_rotated_png(tmp_path / "images" / "train" / f"p{k}.png", (48, 32))  # upright: 32 wide, 48 high
        (tmp_path / "labels" / "train" / f"p{k}.txt").write_text("0 0.5 0.5 0.25 0.25\n")
    (tmp_path / "data.yaml").write_text("path: .\ntrain: images/train\nnames: [a]\n")
    entry = {"type": "yolo", "kwargs": {"data": str(tmp_path / "data.yaml"), "split": "train"}}
    from up_trainer.registry import DATASETS
    import up_trainer.tasks.det.format_datasets  # noqa: F401  (registers yolo)

    ds = DATASETS.build(entry)
    assert (ds.records[0]["width"], ds.records[0]["height"]) == (32, 48)
    assert ds.records[0]["boxes"] == [pytest.approx([12.0, 18.0, 20.0, 30.0])]
    assert tuple(ds[0]["image"].shape[-2:]) == (48, 32)
    cfg = det_cfg(entry, batch_size=2)
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert result.exit_code == 0, result.stderr


def test_sideways_voc_size_hint_names_no_missing_option(digits, tmp_path):
    """A VOC file giving the stored (sideways) size of an EXIF-turned photo is refused, and
    the hint names no option the voc dataset lacks."""
    coco, img_dir, _ = digits
    root = write_voc(coco, img_dir, str(tmp_path / "voc"), "train")
    name = sorted(os.listdir(os.path.join(root, "JPEGImages")))[0]
    exif_rotated_png(os.path.join(root, "JPEGImages", name), (40, 48))  # upright: 48 wide, 40 high
    xml = os.path.join(root, "Annotations", name[:-4] + ".xml")
    text = re.sub(r"<object>.*?</object>\s*", "", open(xml).read(), flags=re.S)  # the stored size, no box
    with open(xml, "w") as f:
        f.write(text.replace("<width>48</width><height>48</height>", "<width>40</width><height>48</height>"))
    entry = {"type": "voc", "kwargs": {"root": root, "split": "train"}}
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", det_cfg(entry)), "--work-dir",
                     tmp_path / "run"])
    line = assert_one_line(result, "image is (40, 48) (h, w) but the annotation says (48, 40)",
                           "images are read upright")
    assert "exif_transpose" not in line


def test_yolo_label_file_not_utf8_names_file_and_line(tmp_path):
    from PIL import Image

    (tmp_path / "images" / "train").mkdir(parents=True)
    (tmp_path / "labels" / "train").mkdir(parents=True)
    Image.new("RGB", (32, 32)).save(tmp_path / "images" / "train" / "a.png")
    (tmp_path / "labels" / "train" / "a.txt").write_bytes(b"0 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2 \xe9t\xe9\n")
    (tmp_path / "data.yaml").write_text("path: .\ntrain: images/train\nnames: [a]\n")
    entry = {"type": "yolo", "kwargs": {"data": str(tmp_path / "data.yaml"), "split": "train"}}
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", det_cfg(entry)), "--work-dir",
                     tmp_path / "run"])
    assert_one_line(result, os.path.join("labels", "train", "a.txt") + ":2: not UTF-8 text")


def test_csv_one_image_under_two_spellings_is_one_image(tmp_path):
    """One file under a relative and an absolute path (or a link) with two labels: refused."""
    from PIL import Image

    from hostile_helpers import tiny_cfg

    (tmp_path / "imgs").mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8)).save(tmp_path / "imgs" / name)
    os.symlink(tmp_path / "imgs" / "b.png", tmp_path / "imgs" / "link.png")
    cfg = tiny_cfg(net={"type": "test_mlp", "kwargs": {"in_features": 192, "num_classes": 2}})  # 8x8 RGB
    cfg["dataset"]["train"] = {"type": "csv", "kwargs": {"csv_file": str(tmp_path / "list.csv")}}
    cfg["dataset"].update(test=cfg["dataset"]["train"], batch_size=2)
    for listed, fragment in ((f"imgs/a.png,dog\nimgs/b.png,cat\n{tmp_path}/imgs/a.png,cat\n",
                              "list.csv:4: " + f"{tmp_path}/imgs/a.png is labelled 'cat' here and 'dog' at line 2"),
                             ("imgs/a.png,dog\nimgs/b.png,cat\nimgs/link.png,dog\n",
                              "list.csv:4: imgs/link.png is labelled 'dog' here and 'cat' at line 3")):
        (tmp_path / "list.csv").write_text("path,label\n" + listed)
        result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "r"])
        assert_one_line(result, fragment)
    shutil.rmtree(tmp_path / "imgs")


def test_csv_list_not_utf8_names_file_and_line(tmp_path):
    from up_trainer.data.formats.csv_cls import read_rows
    from up_trainer.errors import DataError

    (tmp_path / "list.csv").write_bytes(b"path,label\na.png,x\nb.png,\xe9t\xe9\n")
    with pytest.raises(DataError, match=r"list.csv:3: not UTF-8 text \(byte 0xe9\)"):
        read_rows(str(tmp_path / "list.csv"))
    (tmp_path / "bom.csv").write_bytes("\ufeffpath,label\na.png,été\n".encode())  # a byte order mark is fine
    assert read_rows(str(tmp_path / "bom.csv")) == [("a.png", "été", 2)]
