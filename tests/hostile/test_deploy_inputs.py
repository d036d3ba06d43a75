"""Hostile inputs to the deployment commands: exported files and their records as --model of
up eval / up predict, up export's --form / --int8 combinations, up benchmark's --formats."""
import json
import os
import shutil

import pytest
import torch
import yaml

from conftest import invoke
from hostile_helpers import assert_one_line, fifo

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny classifier's config, weights and verified ONNX export (with its record)."""
    from up_trainer.config import resolve_config
    from up_trainer.tasks.net import build_model

    root = tmp_path_factory.mktemp("deploy")
    data = {"type": "digits", "kwargs": {"subset": 8, "size": 16, "split": "test"}}
    cfg = {"runtime": {"num_threads": 1}, "dataset": {"test": data}, "trainer": {"max_epoch": 1},
           "net": {"type": "resnet18", "kwargs": {"num_classes": 10, "in_channels": 1, "small_input": True}}}
    path = root / "cls.yaml"
    path.write_text(yaml.safe_dump(cfg))
    torch.manual_seed(0)
    torch.save(build_model(resolve_config(str(path))["net"]).state_dict(), root / "cls.pth")
    res = invoke(["export", "--config", str(path), "--checkpoint", str(root / "cls.pth"),
                  "--out", str(root / "cls.onnx")])
    assert res.exit_code == 0, res.stderr
    return root


def _copy(root, tmp_path, name="m.onnx"):
    dst = tmp_path / name
    shutil.copy(root / "cls.onnx", dst)
    shutil.copy(root / "cls.onnx.json", str(dst) + ".json")
    return str(dst)


def _eval(root, model):
    return invoke(["eval", "--config", str(root / "cls.yaml"), "--model", model])


def test_record_missing_is_one_line(exported, tmp_path):
    model = _copy(exported, tmp_path)
    os.remove(model + ".json")
    assert_one_line(_eval(exported, model), "--model", "m.onnx.json is missing")


@pytest.mark.parametrize("text", ["{", "[]", json.dumps({"format": "onnx"}),
                                  json.dumps({"format": "zip", "task": "cls", "input": {}})])
def test_broken_record_is_one_line(exported, tmp_path, text):
    model = _copy(exported, tmp_path)
    with open(model + ".json", "w") as f:
        f.write(text)
    assert_one_line(_eval(exported, model), "--model", "m.onnx.json")


def test_garbage_model_file_is_one_line(exported, tmp_path):
    model = _copy(exported, tmp_path)
    with open(model, "wb") as f:
        f.write(b"\x00not an onnx graph" * 10)
    assert_one_line(_eval(exported, model), "--model", "onnx cannot load it")


def test_fifo_as_model_does_not_block(exported, tmp_path):
    path = str(tmp_path / "f.onnx")
    with fifo(path):
        assert_one_line(_eval(exported, path), "--model", "not a regular file")


def test_fifo_as_record_does_not_block(exported, tmp_path):
    model = _copy(exported, tmp_path)
    os.remove(model + ".json")
    with fifo(model + ".json"):
        assert_one_line(_eval(exported, model), "--model", "not a regular file")


def test_checkpoint_given_as_model_is_one_line(exported):
    assert_one_line(_eval(exported, str(exported / "cls.pth")), "not an exported model")


@pytest.mark.parametrize("args, fragment", [
    (["--form", "end2end"], "--form"),                         # a classifier has no end-to-end form
    (["--format", "pt2", "--int8"], "--int8"),                 # int8 runs on the ONNX file
    (["--format", "torchscript", "--form", "end2end"], "--form"),
    (["--form", "nms"], "--form"),
    (["--calib-images", "0", "--int8"], "--calib-images"),
    (["--dynamic-size=yes"], "--dynamic-size"),              # a flag takes no value
])
def test_export_option_mistakes_are_one_line(exported, args, fragment):
    res = invoke(["export", "--config", str(exported / "cls.yaml"), "--checkpoint", str(exported / "cls.pth"),
                  "--out", str(exported / "other.onnx"), *args])
    assert_one_line(res, fragment)


@pytest.mark.parametrize("formats", ["", "eager,trt", ",,", "onnx;pt2"])
def test_benchmark_formats_are_checked(exported, formats):
    res = invoke(["benchmark", "--config", str(exported / "cls.yaml"), "--checkpoint", str(exported / "cls.pth"),
                  "--formats", formats, "--out", str(exported / "bench")])
    assert_one_line(res, "--formats")


@pytest.mark.parametrize("scales", ["x", "0", "1,,9", ""])
def test_tta_scales_are_checked(exported, scales):
    res = invoke(["eval", "--config", str(exported / "cls.yaml"), "--model", str(exported / "cls.onnx"), "--tta",
                  "--tta-scales", scales])
    assert_one_line(res, "--tta-scales")


@pytest.mark.parametrize("change, fragment", [
    ({"input": {"names": ["image", "image_sizes"], "shape": ["batch", 3, "height", "width"], "size_divisible": 0}},
     "size_divisible"),
    ({"input": {"names": ["image"], "shape": ["batch", 3, "height", "width"], "size_divisible": "32"}},
     "size_divisible"),
    ({"size_range": {"height": [-5, None], "width": [33, None]}}, "size_range"),
    ({"size_range": {"height": "all"}}, "size_range"),
])
def test_dynamic_size_detector_record_fields_are_checked(tmp_path, change, fragment):
    """A tampered record of a dynamic-size detector: one line naming the field, before the file
    is read (a size_divisible of 0 would divide by zero while padding a batch)."""
    from up_trainer.errors import ConfigError
    from up_trainer.export.runtime import ExportedModel

    record = {"format": "onnx", "task": "det", "kind": "yolox", "form": "end2end", "dynamic_size": True,
              "input": {"names": ["image", "image_sizes"], "shape": ["batch", 3, "height", "width"],
                        "size_divisible": 32}, "preprocess": {"type": "pad", "size": [64, 64]}}
    record.update(change)
    with pytest.raises(ConfigError) as err:
        ExportedModel(str(tmp_path / "none.onnx"), record)
    assert fragment in str(err.value) and len(str(err.value).splitlines()) == 1
