"""``up export --dynamic-size`` for detectors: anchors / points, per-level counts and top-k sizes
follow the input's size inside the graph; every family that exports verifies at two sizes (ONNX
raw and end to end, pt2), and the file then runs as the model at sizes it never saw."""
import os
import sys

import pytest
import torch
import yaml

from up_trainer.config import resolve_config

pytest.importorskip("onnxruntime")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tasks", "det"))
import test_deploy_families as dense_nets  # noqa: E402  (seeded test detectors of the dense families)
import test_deploy_two_stage as two_stage_nets  # noqa: E402  (and of the two-stage nets, UP's FCOS)

FORMS = (("onnx", "end2end", ".onnx"), ("onnx", "raw", ".raw.onnx"), ("pt2", "raw", ".pt2"))
# The seeded YOLOX scores many points alike (points whose features are all zero score the bias
# alone): with room for every candidate (pre_nms_top_n 1000 >= points x classes at every size used
# here) no tie is cut at a detection limit, where the order of equal scores would pick the winners.
SMALL_YOLOX = {"type": "yolox", "kwargs": {"num_classes": 3, "size": "nano", "width": 0.125, "score_thresh": 0.25,
                                           "detections_per_img": 1000}}


def make(tmp_path, name):
    """(config path, checkpoint, model) of the seeded test net ``name``."""
    if name in two_stage_nets.NETS:
        return two_stage_nets.make_net(tmp_path, name)
    if name == "small_yolox":
        dense_nets.NETS[name] = SMALL_YOLOX
        try:
            cfg, ckpt, model = dense_nets.make_detector(tmp_path, name)
        finally:
            del dense_nets.NETS[name]
        return cfg, ckpt, model
    return dense_nets.make_detector(tmp_path, name)


def test_a_dynamic_size_yolox_end_to_end_onnx_runs_at_sizes_it_never_saw(tmp_path):
    """The default suite's check (the slow test below covers every family, form and format)."""
    from up_trainer.export import export_model
    from up_trainer.export.runtime import ExportedModel
    from up_trainer.export.verify import detections_error

    cfg, ckpt, model = make(tmp_path, "small_yolox")
    out = str(tmp_path / "y.onnx")
    record = export_model(resolve_config(cfg), ckpt, "onnx", out, form="end2end", input_size="3,64,64",
                          dynamic_size=True)
    assert record["dynamic_size"] and record["input"]["shape"] == ["batch", 3, "height", "width"]
    assert record["verified_sizes"] == [[64, 64], [128, 96]] and record["max_error"] <= 1e-4
    assert record["verified_detections"] > 50, record["verified_detections"]
    g = torch.Generator().manual_seed(7)
    for sizes in (((96, 160),), ((136, 40), (100, 72))):  # one batch pads to 96 x 160, the other to 160 x 96
        images = [torch.rand(3, h, w, generator=g) for h, w in sizes]
        with torch.no_grad():
            want = model({"image": images})["detections"]
        got = ExportedModel(out)({"image": images})["detections"]
        assert sum(len(d["boxes"]) for d in want) > 10 and detections_error(got, want) <= 1e-4, sizes


# torch.export fixes an axis of size 1: a pt2 export needs every pyramid level at least 2 pixels at
# the export size (UP's FCOS has a stride-128 level, the Cascade R-CNN file a stride-64 one)
PT2_SIZE = {"up_fcos": "3,256,256", "cascade": "3,128,128"}
# torchvision's nets resize each image to min_size / max_size: at 128 a batch of half-width images
# pads to 128 x 64, a size the pt2 program takes (at 64, 64 x 32 leaves the stride-32 level 1 pixel)
TORCHVISION = ("retinanet", "fcos", "faster_rcnn")
FAMILIES = ["small_yolox", "atss", "atss_multicls", "fcos", "retinanet", "up_fcos", "faster_rcnn", "c4", "cascade",
            "rfcn"]


@pytest.mark.slow  # 10-60 s per family on 2 loaded cores (three exports, each verified at two sizes)
@pytest.mark.parametrize("name", FAMILIES)
def test_every_detector_family_exports_dynamic_size_in_both_forms_and_pt2(tmp_path, name):
    from up_trainer.export import export_model
    from up_trainer.export.runtime import ExportedModel
    from up_trainer.export.verify import detections_error

    cfg, ckpt, model = make(tmp_path, name)
    if name in TORCHVISION:
        data = yaml.safe_load(open(cfg))
        data["net"]["kwargs"].update(min_size=128, max_size=128)
        open(cfg, "w").write(yaml.safe_dump(data))
        model.detector.transform.min_size, model.detector.transform.max_size = (128,), 128
    g = torch.Generator().manual_seed(11)
    images = [torch.rand(3, 160, 96, generator=g), torch.rand(3, 120, 80, generator=g)]  # sizes not verified at
    with torch.no_grad():
        want = model({"image": images})["detections"]
    for fmt, form, suffix in FORMS:
        out = str(tmp_path / f"{name}{suffix}")
        size = PT2_SIZE.get(name) if fmt == "pt2" else None
        record = export_model(resolve_config(cfg), ckpt, fmt, out, form=form, dynamic_size=True, input_size=size)
        assert record["max_error"] <= 1e-4 and len(record["verified_sizes"]) == 2, (fmt, form, record)
        assert record["verified_detections" if "verified_detections" in record else "max_error"] is not None
        got = ExportedModel(out)({"image": images})["detections"]
        assert sum(len(d["boxes"]) for d in want) > 3 and detections_error(got, want) <= 1e-4, (fmt, form)


def test_dynamic_size_refusals_are_one_line(tmp_path):
    """SSDlite resizes every image to one size; a TorchScript detector takes any size already."""
    from conftest import invoke

    cfg, ckpt, _ = make(tmp_path, "ssdlite")
    for fmt, fragment in (("onnx", "ssdlite: the net resizes every image to its fixed size 64x64"),
                          ("torchscript", "a TorchScript detector is the whole scripted model")):
        res = invoke(["export", "--config", cfg, "--checkpoint", ckpt, "--format", fmt, "--dynamic-size",
                      "--out", str(tmp_path / f"s.{fmt}")])
        assert res.exit_code == 2 and fragment in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # one pt2 trace (about 10 s)
def test_pt2_traced_where_a_level_is_one_pixel_is_refused_in_one_line(tmp_path):
    from conftest import invoke

    cfg, ckpt, _ = make(tmp_path, "up_fcos")  # levels of strides 8-128: at 64 x 64 the last three are 1 pixel
    res = invoke(["export", "--config", cfg, "--checkpoint", ckpt, "--format", "pt2", "--dynamic-size",
                  "--out", str(tmp_path / "f.pt2")])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "torch.export bounds the height to" in res.stderr and "--input-size" in res.stderr
