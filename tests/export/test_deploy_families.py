"""Every dense detector family exports to ONNX (raw and end to end) and pt2 and verifies on reload;
the exported file then runs as the model (up_trainer.export.runtime) on new images."""
import json

import pytest
import torch
import yaml

from up_trainer.config import resolve_config
from up_trainer.tasks.net import build_model

pytest.importorskip("onnxruntime")

SCENES = {"split": "val", "num_images": 2, "canvas_size": 64}
TV = {"num_classes": 3, "backbone": "resnet18", "returned_layers": [2, 3], "fpn_extra": "none", "fpn_channels": 32,
      "min_size": 64, "max_size": 64, "score_thresh": 0.2, "detections_per_img": 30}
NETS = {
    "retinanet": {"type": "retinanet", "kwargs": TV},
    "fcos": {"type": "fcos", "kwargs": {**TV, "head_convs": 1}},
    "ssdlite": {"type": "ssdlite", "kwargs": {"num_classes": 3, "min_size": 64, "max_size": 64, "score_thresh": 0.2,
                                              "detections_per_img": 30}},
    "yolox": {"type": "yolox", "kwargs": {"num_classes": 3, "size": "nano", "score_thresh": 0.3,
                                          "detections_per_img": 100}},
    "atss": {"type": "atss", "kwargs": {"num_classes": 3, "backbone": "resnet18", "returned_layers": [2, 3],
                                        "fpn_channels": 32, "extra_levels": 0, "head_convs": 1, "iou_branch": True,
                                        "anchor_scales": [2.0], "score_thresh": 0.2, "detections_per_img": 30}},
}
# the digits ATSS demo's predictor: per level the best (anchor, class) pairs jointly (``base`` ranks per class)
NETS["atss_multicls"] = {"type": "atss", "kwargs": {**NETS["atss"]["kwargs"], "predictor": "base_multicls",
                                                    "head_norm": "bn"}}


def make_detector(tmp_path, name):
    """A config and a bare-weights file: the head's convolutions get seeded random weights of
    unit gain, so scores spread over (0, 1) and the detections hold several classes with few
    equal scores (a fresh head predicts its prior almost everywhere)."""
    cfg = {"runtime": {"num_threads": 1}, "dataset": {"test": {"type": "digits_det", "kwargs": SCENES}},
           "trainer": {"max_epoch": 1}, "net": NETS[name]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    torch.manual_seed(0)
    model = build_model(resolve_config(str(path))["net"]).eval()
    with torch.no_grad():
        for key, module in model.named_modules():
            if isinstance(module, torch.nn.Conv2d) and "head" in key:
                fan_in = module.weight[0].numel()
                module.weight.normal_(0, 1.0 / fan_in ** 0.5)
                if module.bias is not None:
                    module.bias.normal_(0.0, 0.5)
    ckpt = tmp_path / f"{name}.pth"
    torch.save(model.state_dict(), ckpt)
    return str(path), str(ckpt), model


def scenes(n, seed=3):
    """``n`` digits_det scenes as the models take them (float [0, 1], 3 x 64 x 64)."""
    from up_trainer.tasks.det.digits_det import DigitsDetection

    ds = DigitsDetection(split="val", num_images=n, canvas_size=64, seed=seed)
    return [torch.as_tensor(ds.scene(i)[0]).float().expand(3, -1, -1).contiguous() for i in range(n)]


@pytest.mark.slow  # 10-40 s per family on 2 idle cores (three exports, each verified)
@pytest.mark.parametrize("name", list(NETS))
def test_every_dense_family_exports_in_both_forms_and_pt2(tmp_path, name):
    from up_trainer.export import export_model
    from up_trainer.export.runtime import ExportedModel
    from up_trainer.export.verify import detections_error

    cfg, ckpt, model = make_detector(tmp_path, name)
    images = scenes(2)
    with torch.no_grad():
        want = model({"image": images})["detections"]
    assert sum(len(d["boxes"]) for d in want) > 3, "the test model should detect something"
    for fmt, form, suffix in (("onnx", "end2end", ".onnx"), ("onnx", "raw", ".raw.onnx"), ("pt2", "raw", ".pt2")):
        out = str(tmp_path / f"{name}{suffix}")
        record = export_model(resolve_config(cfg), ckpt, fmt, out, form=form)
        assert record["max_error"] <= 1e-4 and json.load(open(out + ".json"))["format"] == fmt
        got = ExportedModel(out)({"image": images})["detections"]  # read back from the file and its record
        assert detections_error(got, want) <= 1e-4, (fmt, form)
    e2e = json.load(open(str(tmp_path / f"{name}.onnx.json")))
    assert e2e["outputs"] == ["num_detections", "boxes", "scores", "labels"] and e2e["post_processing"] == "included"


def test_a_small_yolox_end_to_end_onnx_runs_as_the_model(tmp_path):
    """The default suite's check of the end-to-end path (the slow test above covers every family)."""
    from up_trainer.export import export_model
    from up_trainer.export.runtime import ExportedModel
    from up_trainer.export.verify import detections_error

    NETS["small_yolox"] = {"type": "yolox", "kwargs": {"num_classes": 3, "size": "nano", "width": 0.125,
                                                       "score_thresh": 0.1, "detections_per_img": 300}}
    try:
        cfg, ckpt, model = make_detector(tmp_path, "small_yolox")
    finally:
        del NETS["small_yolox"]
    out = str(tmp_path / "y.onnx")
    record = export_model(resolve_config(cfg), ckpt, "onnx", out, form="end2end", input_size="3,64,64")
    assert record["max_error"] <= 1e-4 and record["verified_batches"] == [1, 3]
    images = scenes(3)
    images[1] = images[1][:, :40, :56].contiguous()  # another size in the same batch: padded, clipped
    with torch.no_grad():
        want = model({"image": images})["detections"]
    got = ExportedModel(out)({"image": images})["detections"]
    assert sum(len(d["boxes"]) for d in want) > 3 and detections_error(got, want) <= 1e-4
    assert all((d["boxes"][:, 2] <= 56).all() for d in got[1:2])  # clipped to the smaller image


def test_atss_base_multicls_selection_reproduces_the_models_detections(tmp_path):
    """The decode step of the ATSS ``base_multicls`` predictor (one joint top-k per level), run
    eagerly on the dense outputs, gives the model's detections; the slow test above exports it."""
    from up_trainer.export.dense import dense_graph
    from up_trainer.export.select import Select, unpad
    from up_trainer.export.verify import detections_error

    _, _, model = make_detector(tmp_path, "atss_multicls")
    dense = dense_graph(model, 64, 64)
    assert not any(level.per_class for level in dense.spec.levels)
    assert [level.k for level in dense.spec.levels] == [model.predictor.pre_nms_top_n] * 2
    images = scenes(3)
    images[2] = images[2][:, :, :40].contiguous()
    x = torch.zeros(3, 3, 64, 64)
    if model.image_mean is not None:  # the net pads after normalising: the mean normalises to 0
        x += model.image_mean.view(1, -1, 1, 1)
    for i, im in enumerate(images):
        x[i, :, :, : im.shape[-1]] = im
    sizes = torch.tensor([[64, 64], [64, 64], [64, 40]])
    with torch.no_grad():
        want = model({"image": images})["detections"]
        got = unpad(*Select(dense.spec)(*dense(x), sizes))
    assert sum(len(d["boxes"]) for d in want) > 3 and detections_error(got, want) <= 1e-5
