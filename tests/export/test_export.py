"""up export: ONNX and TorchScript round trips for classifiers and detectors, verified on export."""
import json

import pytest
import torch
import yaml
from click.testing import CliRunner

from up_trainer.cli import main
from up_trainer.config import resolve_config
from up_trainer.tasks.net import build_model

DET_NET = {"num_classes": 3, "backbone": "resnet18", "returned_layers": [2, 3], "fpn_extra": "none",
           "fpn_channels": 32, "min_size": 64, "max_size": 64, "score_thresh": 0.05, "detections_per_img": 30}
NETS = {"resnet18": {"type": "resnet18", "kwargs": {"num_classes": 10, "in_channels": 1, "small_input": True}},
        "mobilenet_v3_small": {"type": "mobilenet_v3_small", "kwargs": {"num_classes": 10, "in_channels": 1}},
        "fcos": {"type": "fcos", "kwargs": {**DET_NET, "head_convs": 1}},
        "retinanet": {"type": "retinanet", "kwargs": DET_NET},
        "faster_rcnn": {"type": "faster_rcnn", "kwargs": {**DET_NET, "backbone": "mobilenet_v3_large"}}}


def _setup(tmp_path, name):
    """A config and a bare-weights file; detector heads get seeded random weights so scores spread
    over (0, 1) and post-processing keeps boxes of several classes."""
    is_det = name in ("fcos", "retinanet", "faster_rcnn")
    test = ({"type": "digits_det", "kwargs": {"split": "val", "num_images": 2, "canvas_size": 48}} if is_det else
            {"type": "digits", "kwargs": {"split": "test", "subset": 8, "size": 32}})
    cfg = {"runtime": {"num_threads": 1}, "dataset": {"test": test}, "trainer": {"max_epoch": 1}, "net": NETS[name]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    torch.manual_seed(0)
    model = build_model(resolve_config(str(path))["net"])
    if name in ("fcos", "retinanet"):
        with torch.no_grad():
            head = model.head.classification_head
            head.cls_logits.weight.normal_(0, 0.5)
            head.cls_logits.bias.normal_(-1.0, 1.0)
    ckpt = tmp_path / f"{name}.pth"
    torch.save(model.state_dict(), ckpt)
    return str(path), str(ckpt), model.eval()


def _export(cfg, ckpt, fmt, *extra, code=0):
    res = CliRunner().invoke(main, ["export", "--config", cfg, "--checkpoint", ckpt, "--format", fmt, *extra])
    assert res.exit_code == code, res.output + repr(res.exception)
    return res


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_classifier_round_trips_with_a_free_batch_axis(tmp_path, name):
    pytest.importorskip("onnxruntime")
    from up_trainer.export.verify import onnx_runner

    cfg, ckpt, model = _setup(tmp_path, name)
    x = torch.rand(5, 1, 32, 32)  # a batch size neither traced nor verified on export
    with torch.no_grad():
        want = model({"image": x})["logits"]
    for fmt, suffix in (("onnx", ".onnx"), ("torchscript", ".pt")):
        out = str(tmp_path / f"{name}{suffix}")
        res = _export(cfg, ckpt, fmt, "--out", out)
        record = json.loads(open(out + ".json").read())
        assert record["input"]["shape"] == ["batch", 1, 32, 32] and record["outputs"] == ["logits", "scores"]
        assert record["max_error"] <= record["tolerance"] == 1e-4 and "max error" in res.output
        logits, scores = onnx_runner(out)(x) if fmt == "onnx" else torch.jit.load(out)(x)
        assert logits.shape == (5, 10)
        assert torch.allclose(logits, want, atol=1e-4) and torch.allclose(scores.sum(1), torch.ones(5), atol=1e-5)


@pytest.mark.parametrize("kind", ["fcos", "retinanet"])
def test_detector_onnx_raw_heads_decode_to_the_models_detections(tmp_path, kind):
    pytest.importorskip("onnxruntime")
    from up_trainer.export import export_model
    from up_trainer.export.decode import decode_detections
    from up_trainer.export.verify import detections_error, onnx_runner

    cfg, ckpt, model = _setup(tmp_path, kind)
    out = str(tmp_path / f"{kind}.onnx")
    record = export_model(resolve_config(cfg), ckpt, "onnx", out)
    names = ["cls_logits", "bbox_regression"] + (["bbox_ctrness"] if kind == "fcos" else [])
    assert record["outputs"] == names + ["anchors"] and record["decode"]["image_size"] == [64, 64]
    images = torch.rand(3, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    outputs = onnx_runner(out)(images)
    got = decode_detections(outputs, record["decode"], (64, 64), original_sizes=[(128, 96)] * 3)
    with torch.no_grad():
        want = model({"image": list(images)})["detections"]
    for d in want:  # the same images seen at twice the height, 1.5 times the width
        d["boxes"] = d["boxes"] * torch.tensor([1.5, 2.0, 1.5, 2.0])
    assert sum(len(d["boxes"]) for d in want) > 10 and len({int(v) for d in want for v in d["labels"]}) > 1
    assert detections_error(got, want) < 1e-4


@pytest.mark.parametrize("kind", ["fcos", "retinanet"])
def test_detector_torchscript_includes_post_processing(tmp_path, kind):
    import torchvision  # noqa: F401  (registers the ops the scripted module calls, e.g. nms)

    cfg, ckpt, model = _setup(tmp_path, kind)
    out = str(tmp_path / f"{kind}.pt")
    _export(cfg, ckpt, "torchscript", "--out", out)
    assert json.loads(open(out + ".json").read())["post_processing"] == "included"
    images = [torch.rand(3, 64, 64), torch.rand(3, 40, 56)]  # a list, any sizes
    with torch.no_grad():
        got = torch.jit.load(out)(images)
        want = model({"image": images})["detections"]
    assert len(got) == 2 and len(got[0]["boxes"]) > 0
    for g, w in zip(got, want):
        assert torch.equal(g["labels"], w["labels"]) and torch.allclose(g["boxes"], w["boxes"], atol=1e-4)


def test_ema_weights_are_exported_when_the_checkpoint_has_them(tmp_path):
    from up_trainer.engine.checkpoint import FORMAT

    cfg, _, model = _setup(tmp_path, "mobilenet_v3_small")
    ema = {k: (v + 0.05 * torch.randn(v.shape)) if v.is_floating_point() else v for k, v in model.state_dict().items()}
    ckpt_path = str(tmp_path / "ckpt_e1.pth")
    torch.save({"format": FORMAT, "model": model.state_dict(), "ema": {"model": ema, "updates": 3}, "epoch": 1,
                "iter": 3}, ckpt_path)
    x = torch.rand(2, 1, 32, 32)
    outs = {}
    for flag, key in (([], "ema"), (["--no-ema"], "model")):
        out = str(tmp_path / f"{key}.pt")
        _export(cfg, ckpt_path, "torchscript", "--out", out, *flag)
        assert json.loads(open(out + ".json").read())["weights"] == key
        reference = build_model(resolve_config(cfg)["net"]).eval()
        reference.load_state_dict(ema if key == "ema" else model.state_dict())
        with torch.no_grad():
            outs[key] = torch.jit.load(out)(x)[0]
            assert torch.allclose(outs[key], reference({"image": x})["logits"], atol=1e-5)
    assert not torch.allclose(outs["ema"], outs["model"])  # the two really are different weights


def test_verification_failure_exits_1_with_the_max_error(tmp_path):
    pytest.importorskip("onnxruntime")
    cfg, ckpt, _ = _setup(tmp_path, "retinanet")
    res = _export(cfg, ckpt, "onnx", "--out", str(tmp_path / "r.onnx"), "--tolerance", "1e-12", code=1)
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("up: error: export verification failed") and "max error" in line and "> tolerance 1e-12" in line
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args, message", [
    (["--format", "pt2", "--form", "end2end"], "end2end is the ONNX form"),
    (["--format", "torchscript", "--dynamic-size"], "--dynamic-size: faster_rcnn: a TorchScript detector"),
    (["--format", "torchscript", "--input-size", "3,x,64"], "--input-size"),
    (["--format", "torchscript", "--tolerance", "-1"], "--tolerance"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    if "onnx" in args:
        pytest.importorskip("onnxruntime")  # without it the missing extra is reported first
    cfg, ckpt, _ = _setup(tmp_path, "faster_rcnn")
    res = CliRunner().invoke(main, ["export", "--config", cfg, "--checkpoint", ckpt, *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and len(res.output.strip().splitlines()) == 1


def test_missing_checkpoint_is_exit_2(tmp_path):
    cfg, _, _ = _setup(tmp_path, "resnet18")
    res = CliRunner().invoke(main, ["export", "--config", cfg, "--checkpoint", str(tmp_path / "no.pth"),
                                    "--format", "torchscript"])
    assert res.exit_code == 2 and "no.pth" in res.output
