"""Exported models and the files commands write: verification that compares real detections
(never a false alarm at a cut, never "verified" over nothing), an exported model's class count
checked like a checkpoint's, quiet pt2 loading, outputs compared with inputs by real path, and
convert's writes planned before any is made."""
import json
import os

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from conftest import invoke
from hostile_helpers import assert_one_line, tiny_cfg, write_yaml


# -- export verification: real detections, a stated margin, never "verified" over nothing ------------
SCENES = {"canvas_size": 64, "digits_per_image": [1, 3], "scale_range": [12, 24], "noise": 0.05}


def _dets(scores, labels, boxes):
    return {"scores": torch.tensor(scores), "labels": torch.tensor(labels),
            "boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)}


def test_detections_at_a_cut_are_left_out_and_a_real_difference_is_named():
    from up_trainer.export.compare import Cuts, compare_detections

    cuts = Cuts(thresh=0.05, detections=3, nms_thresh=0.5)
    box = [[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50], [5, 40, 15, 50]]
    want = _dets([0.9, 0.5, 0.5], [1, 2, 3], box[:3])  # two tied at the top-k cut of 3
    got = _dets([0.9, 0.5, 0.5], [1, 2, 4], box[:2] + box[3:])  # the other one of the tie kept
    out = compare_detections([got], [want], cuts, 1e-4, ["val image #0"], [64])
    assert (out.problem, out.compared, out.left_out, out.reasons) == (None, 2, 2, {"top-k cut": 2})
    # at the score threshold: a detection there on one side only is left out too
    out = compare_detections([_dets([0.9, 0.05001], [1, 2], box[:2])], [_dets([0.9], [1], box[:1])], cuts, 1e-4,
                             ["val image #0"], [64])
    assert (out.problem, out.compared, out.reasons) == (None, 1, {"score threshold": 1})
    # two overlapping boxes of equal score: NMS kept one here, the other there
    shifted = [[1, 0, 11, 10]]
    out = compare_detections([_dets([0.7], [1], shifted)], [_dets([0.7], [1], box[:1])], cuts, 1e-4, ["x"], [64])
    assert (out.problem, out.reasons) == (None, {"NMS tie": 2})
    # a detection far from every cut, on one side only: named, with both counts and the cuts
    out = compare_detections([_dets([0.9], [1], box[:1])], [_dets([0.9, 0.6], [1, 2], box[:2])], cuts, 1e-4,
                             ["val image #3 (a.png)"], [64])
    assert out.problem.startswith("on val image #3 (a.png): PyTorch 2 detections, exported 1; the PyTorch "
                                  "detection label 2 score 0.6 box [20.0, 20.0, 30.0, 30.0] has no partner"), out.problem
    assert "score threshold 0.05, 3 kept at most" in out.problem


def _yolox_cfg(tmp_path, epochs=1):
    cfg = {"runtime": {"seed": 0, "num_threads": 1},
           "dataset": {"train": {"type": "digits_det", "kwargs": {"split": "train", "num_images": 16, "seed": 0,
                                                                  **SCENES}},
                       "test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 4, "seed": 1,
                                                                 **SCENES}},
                       "batch_size": 8, "num_workers": 0},
           "trainer": {"max_epoch": epochs, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.02, "momentum": 0.9}}},
           "saver": {"save_dir": "checkpoints"},
           "net": {"type": "yolox", "kwargs": {"size": "nano", "num_classes": 10}}}
    return write_yaml(tmp_path / "yolox.yaml", cfg)


def test_an_export_that_compared_no_detection_is_not_verified(tmp_path):
    """An untrained YOLOX scores every candidate 1e-4, under its threshold: the end-to-end file
    (threshold inside) compares nothing, which is said, exit 1, and never "verified"."""
    pytest.importorskip("onnxruntime")
    from up_trainer.config import resolve_config
    from up_trainer.tasks.net import build_model

    cfg = _yolox_cfg(tmp_path)
    torch.manual_seed(0)
    torch.save(build_model(resolve_config(cfg)["net"]).state_dict(), tmp_path / "w.pth")
    res = invoke(["export", "--config", cfg, "--checkpoint", str(tmp_path / "w.pth"), "--form", "end2end",
                  "--out", str(tmp_path / "m.onnx")])
    assert_one_line(res, "export verification compared no detections: the model detects nothing on 4 of the val "
                    "set (dataset.test) at score threshold 0.01, so nothing was verified", code=1)
    assert "verified" not in res.stdout
    assert json.load(open(tmp_path / "m.onnx.json"))["verification"]["compared_detections"] == 0


YOLOX_OPTS = ["trainer.max_epoch=1", "dataset.test.kwargs.num_images=16"]


@pytest.fixture(scope="module")
def yolox_one_epoch(tmp_path_factory):
    """configs/det/digits_yolox.yaml trained for one epoch: its checkpoint."""
    work = tmp_path_factory.mktemp("yolox")
    res = invoke(["train", "--config", "configs/det/digits_yolox.yaml", "--work-dir", str(work / "run"),
                  "--opts", *YOLOX_OPTS])
    assert res.exit_code == 0, res.stderr
    return work / "run" / "checkpoints" / "ckpt_e1.pth"


@pytest.mark.slow  # a minute or two on 2 cores: one epoch of the digits YOLOX recipe, two exports
@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_yolox_after_one_epoch_exports_and_verifies(yolox_one_epoch, tmp_path, fmt):
    """configs/det/digits_yolox.yaml after one epoch: its scores saturate (many exactly 1.0), so
    which of the tied candidates pass the top-k cut is arbitrary; that used to be 'max error inf'."""
    pytest.importorskip("onnxruntime")
    out = tmp_path / f"m.{fmt}"
    res = invoke(["export", "--config", "configs/det/digits_yolox.yaml", "--checkpoint", str(yolox_one_epoch),
                  "--format", fmt, "--out", str(out), "--opts", *YOLOX_OPTS])
    assert res.exit_code == 0, res.stderr
    check = json.load(open(str(out) + ".json"))["verification"]
    assert check["problem"] is None and check["compared_detections"] >= 100, check
    assert check["images"] == "4 of the val set (dataset.test)"


# -- an exported model's class count (--model) ----------------------------------------------------
@pytest.fixture(scope="module")
def three_class_onnx(tmp_path_factory):
    """A test_mlp with 3 outputs exported to ONNX (its record says num_classes 3)."""
    pytest.importorskip("onnxruntime")
    from up_trainer.config import resolve_config
    from up_trainer.tasks.net import build_model

    work = tmp_path_factory.mktemp("three")
    cfg = tiny_cfg(net={"type": "test_mlp", "kwargs": {"in_features": 64, "num_classes": 3}})
    path = write_yaml(work / "three.yaml", cfg)
    torch.save(build_model(resolve_config(path)["net"]).state_dict(), work / "w.pth")
    res = invoke(["export", "--config", path, "--checkpoint", work / "w.pth", "--out", work / "m.onnx"])
    assert res.exit_code == 0, res.stderr
    assert json.load(open(work / "m.onnx.json"))["num_classes"] == 3
    return work / "m.onnx"


@pytest.mark.parametrize("classes", [10, 2], ids=["fewer-than-the-data", "more-than-the-config"])
@pytest.mark.parametrize("command", ["eval", "predict"])
def test_model_of_another_class_count_is_one_line(three_class_onnx, tmp_path, command, classes):
    """3 classes exported; the config's net (and data) has 10, or 2: refused as --checkpoint refuses it."""
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(
        net={"type": "test_mlp", "kwargs": {"in_features": 64, "num_classes": classes}},
        saver={"save_dir": "checkpoints", "results_dir": str(tmp_path / "results")}))
    args = [command, "--config", cfg, "--model", three_class_onnx]
    if command == "predict":
        os.makedirs(tmp_path / "in")
        Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "in" / "a.png")
        args += ["--input", tmp_path / "in", "--out", tmp_path / "out"]
    res = invoke([str(a) for a in args])
    assert_one_line(res, f"m.onnx predicts 3 classes, the config's net {classes} (net.kwargs.num_classes)")
    assert not os.path.exists(tmp_path / "out" / "predictions.jsonl")


# -- pt2 loading is quiet ---------------------------------------------------------------------------
@pytest.mark.parametrize("content", ["onnx", "checkpoint"])
def test_a_pt2_file_torch_cannot_read_is_one_line(three_class_onnx, tmp_path, content):
    """ONNX bytes (or a torch.save checkpoint, also a zip) named .pt2 beside a pt2 record: one line,
    without the traceback torch.export logs before it raises."""
    fake = tmp_path / "m.pt2"
    if content == "onnx":
        fake.write_bytes(three_class_onnx.read_bytes())
    else:
        torch.save({"model": {"w": torch.zeros(2)}}, fake)
    record = json.load(open(str(three_class_onnx) + ".json"))
    json.dump(dict(record, format="pt2", file=str(fake)), open(str(fake) + ".json", "w"))
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(net={"type": "test_mlp", "kwargs": {"num_classes": 3}},
                                                     saver={"results_dir": str(tmp_path / "results")}))
    res = invoke(["eval", "--config", cfg, "--model", str(fake)])
    assert_one_line(res, f"--model: {fake}: ", "its bytes look like an ONNX file: name it .onnx" if content == "onnx"
                    else "pt2 cannot load it")


# -- outputs compared with inputs by real path, links followed --------------------------------------
@pytest.mark.parametrize("layout", ["files", "links", "link-to-link"])
def test_predict_out_among_its_inputs_is_refused_through_links(tmp_path, layout):
    """--input D --out D: refused whether D holds the images, symlinks to them (what up data
    convert writes by default) or links to links; nothing is written in D."""
    src, folder = tmp_path / "src", tmp_path / "D"
    src.mkdir()
    folder.mkdir()
    for name in ("a.png", "b.png"):
        Image.fromarray(np.zeros((8, 8), np.uint8)).save(src / name)
        if layout == "files":
            (folder / name).write_bytes((src / name).read_bytes())
        elif layout == "links":
            os.symlink(src / name, folder / name)
        else:
            os.symlink(src / name, tmp_path / f"hop-{name}")
            os.symlink(tmp_path / f"hop-{name}", folder / name)
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    torch.save({"w": torch.zeros(1)}, tmp_path / "w.pth")
    before = sorted(os.listdir(folder))
    res = invoke(["predict", "--config", cfg, "--checkpoint", str(tmp_path / "w.pth"), "--input", str(folder),
                  "--out", str(folder)])
    assert_one_line(res, f"--out: {folder} holds the input {folder / 'a.png'}", "give an output directory of its own")
    assert sorted(os.listdir(folder)) == before


# -- convert plans every output name, then writes in a staging folder --------------------------------
def coco_set(root, names):
    """A COCO file over images ``names`` (16x16, one box each): root/src/ann.json, root/src/imgs/."""
    root = root / "src"
    (root / "imgs").mkdir(parents=True)
    images, anns = [], []
    for i, name in enumerate(names, 1):
        Image.fromarray(np.full((16, 16, 3), 40 * i, np.uint8)).save(root / "imgs" / name)
        images.append({"id": i, "file_name": name, "width": 16, "height": 16})
        anns.append({"id": i, "image_id": i, "category_id": 1, "bbox": [2, 2, 8, 8], "area": 64, "iscrowd": 0})
    ann = root / "ann.json"
    ann.write_text(json.dumps({"images": images, "annotations": anns, "categories": [{"id": 1, "name": "box"}]}))
    return ann


@pytest.mark.parametrize("out_exists", [False, True], ids=["new-out", "empty-out"])
def test_convert_refuses_two_images_on_one_label_name_before_writing(tmp_path, out_exists):
    ann = coco_set(tmp_path, ["x.jpg", "x.png"])
    out = tmp_path / "out"
    if out_exists:
        out.mkdir()
    res = invoke(["data", "convert", "--from", "coco", "--to", "yolo", "--input", str(ann), "--images",
                  str(tmp_path / "src" / "imgs"), "--out", str(out)])
    assert_one_line(res, "x.png", "x.jpg", "would both be written as labels/train/x.txt")
    assert (sorted(os.listdir(out)) == []) if out_exists else not os.path.lexists(out)
    assert not [n for n in os.listdir(tmp_path) if "partial" in n]


@pytest.mark.parametrize("out_exists", [False, True], ids=["new-out", "empty-out"])
def test_convert_writes_its_whole_output_or_nothing(tmp_path, out_exists, monkeypatch):
    ann = coco_set(tmp_path, ["a.png", "b.png"])
    out = tmp_path / "out"
    if out_exists:
        out.mkdir()
    args = ["data", "convert", "--from", "coco", "--to", "yolo", "--input", str(ann), "--images",
            str(tmp_path / "src" / "imgs"), "--out", str(out)]
    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:  # the last file fails: nothing of the others is left
        m.setattr(yaml, "safe_dump", full_disk)
        res = invoke(args)
    assert res.exit_code != 0
    assert (sorted(os.listdir(out)) == []) if out_exists else not os.path.lexists(out)
    res = invoke(args)
    assert res.exit_code == 0, res.stderr
    files = sorted(os.path.relpath(os.path.join(r, f), out) for r, _, fs in os.walk(out) for f in fs)
    assert files == ["data.yaml", "images/train/a.png", "images/train/b.png", "labels/train/a.txt",
                     "labels/train/b.txt"], files
    assert yaml.safe_load(open(out / "data.yaml"))["names"] == {0: "box"}


# -- docs and behaviour agree -----------------------------------------------------------------------
def test_load_config_converts_numpy_scalars_as_documented():
    """docs/python_api.rst: numpy scalars in a mapping are converted (a value computed with numpy)."""
    from up_trainer import load_config

    cfg = tiny_cfg()
    cfg["trainer"]["max_epoch"] = np.int64(2)
    cfg["trainer"]["optimizer"]["kwargs"]["lr"] = np.float32(0.5)
    cfg["dataset"]["test_batch_size"] = np.array(64)  # a 0-d array
    cfg["runtime"]["deterministic"] = np.bool_(True)
    got = load_config(cfg)
    assert (got["trainer"]["max_epoch"], got["trainer"]["optimizer"]["kwargs"]["lr"],
            got["dataset"]["test_batch_size"], got["runtime"]["deterministic"]) == (2, 0.5, 64, True)
    assert [type(v) for v in (got["trainer"]["max_epoch"], got["runtime"]["deterministic"])] == [int, bool]


def test_convert_errors_name_convert_options(tmp_path):
    """convert's classes are --classes (not kwargs.classes); a bad record's way out is not a config
    option convert does not have (on_bad_record)."""
    ann = coco_set(tmp_path, ["a.png"])
    data = json.loads(ann.read_text())
    data["annotations"][0]["bbox"] = [2, 2, -3, 8]
    ann.write_text(json.dumps(data))
    res = invoke(["data", "convert", "--from", "coco", "--to", "yolo", "--input", str(ann), "--images",
                  str(tmp_path / "src" / "imgs"), "--out", str(tmp_path / "out")])
    assert_one_line(res, "non-positive size", "up data convert carries valid records only")
    assert "on_bad_record" not in res.stderr
    voc = tmp_path / "voc"
    (voc / "Annotations").mkdir(parents=True)
    (voc / "JPEGImages").mkdir()
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(voc / "JPEGImages" / "a.png")
    (voc / "Annotations" / "a.xml").write_text(
        "<annotation><filename>a.png</filename><size><width>16</width><height>16</height><depth>3</depth></size>"
        "<object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>8</xmax><ymax>8</ymax></bndbox>"
        "</object></annotation>")
    res = invoke(["data", "convert", "--from", "voc", "--to", "yolo", "--input", str(voc), "--classes", "cat,cat",
                  "--out", str(tmp_path / "out")])
    assert_one_line(res, "up: error: --classes: ")
    assert not os.path.lexists(tmp_path / "out")
