"""An exported classifier as a deployed artifact: pt2 beside TorchScript, int8 with its
accuracy cost, and up eval / up predict on the file."""
import json
import warnings

import pytest
import torch
import yaml
from click.testing import CliRunner

from up_trainer.cli import main
from up_trainer.config import resolve_config
from up_trainer.tasks.net import build_model

pytest.importorskip("onnxruntime")

NET = {"type": "resnet18", "kwargs": {"num_classes": 10, "in_channels": 1, "small_input": True}}


def classifier(tmp_path):
    data = {"type": "digits", "kwargs": {"subset": 24, "size": 16}}
    cfg = {"runtime": {"num_threads": 1, "seed": 0},
           "dataset": {"train": {**data, "kwargs": {**data["kwargs"], "split": "train"}},
                       "test": {**data, "kwargs": {**data["kwargs"], "split": "test"}}, "batch_size": 8},
           "trainer": {"max_epoch": 1}, "saver": {"results_dir": str(tmp_path / "results")}, "net": NET}
    path = tmp_path / "cls.yaml"
    path.write_text(yaml.safe_dump(cfg))
    torch.manual_seed(0)
    model = build_model(resolve_config(str(path))["net"]).eval()
    ckpt = tmp_path / "cls.pth"
    torch.save(model.state_dict(), ckpt)
    return str(path), str(ckpt), model


def invoke(*args, code=0):
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == code, res.output + repr(res.exception)
    return res


def test_pt2_round_trip_and_no_torchscript_warning_on_the_default_path(tmp_path):
    cfg, ckpt, model = classifier(tmp_path)
    out = str(tmp_path / "cls.pt2")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        invoke("export", "--config", cfg, "--checkpoint", ckpt, "--format", "pt2", "--out", out)
        invoke("export", "--config", cfg, "--checkpoint", ckpt, "--out", str(tmp_path / "cls.onnx"))  # default: onnx
    assert not [w for w in caught if "torch.jit" in str(w.message) or "TorchScript" in str(w.message)]
    record = json.load(open(out + ".json"))
    assert record["format"] == "pt2" and record["max_error"] <= 1e-4
    x = torch.rand(5, 1, 16, 16)
    logits, _ = torch.export.load(out).module()(x)  # only torch needed to run it
    with torch.no_grad():
        assert torch.allclose(logits, model({"image": x})["logits"], atol=1e-4)


def test_eval_and_predict_accept_the_exported_file(tmp_path):
    cfg, ckpt, _ = classifier(tmp_path)
    out = str(tmp_path / "cls.onnx")
    invoke("export", "--config", cfg, "--checkpoint", ckpt, "--out", out)
    invoke("eval", "--config", cfg, "--checkpoint", ckpt)
    want = json.load(open(tmp_path / "results" / "metrics.json"))
    invoke("eval", "--config", cfg, "--model", out)
    got = json.load(open(tmp_path / "results" / "metrics.json"))
    assert got["top1"] == pytest.approx(want["top1"]) and set(got) == set(want)
    from PIL import Image

    Image.new("L", (16, 16), 128).save(tmp_path / "a.png")
    invoke("predict", "--config", cfg, "--model", out, "--input", str(tmp_path / "a.png"), "--out",
           str(tmp_path / "pred"))
    invoke("predict", "--config", cfg, "--checkpoint", ckpt, "--input", str(tmp_path / "a.png"), "--out",
           str(tmp_path / "pred_ckpt"))
    a, b = (json.loads(open(tmp_path / d / "predictions.jsonl").readline()) for d in ("pred", "pred_ckpt"))
    assert a["label"] == b["label"] and a["score"] == pytest.approx(b["score"], abs=1e-3)


def test_int8_export_prints_its_accuracy_cost(tmp_path):
    cfg, ckpt, _ = classifier(tmp_path)
    out = str(tmp_path / "cls.onnx")
    res = invoke("export", "--config", cfg, "--checkpoint", ckpt, "--out", out, "--int8", "--calib-images", "8")
    line = res.output.strip().splitlines()[-1]
    assert "cls.int8.onnx: int8 (static, 8 calibration images), top1 on the val split" in line and "->" in line
    record = json.load(open(str(tmp_path / "cls.int8.onnx.json")))
    assert record["int8"]["method"] == "static" and record["int8"]["size_int8"] < record["int8"]["size_fp32"]
    delta = record["int8"]["int8"] - record["int8"]["fp32"]
    assert record["int8"]["delta"] == pytest.approx(delta)
    invoke("eval", "--config", cfg, "--model", str(tmp_path / "cls.int8.onnx"))  # the int8 file evaluates too


@pytest.mark.parametrize("args, message", [
    (["--model", "x.pth"], "not an exported model"),
    (["--checkpoint", "a.pth", "--model", "b.onnx"], "give one of --checkpoint"),
    ([], "give one of --checkpoint"),
    (["--model", "missing.onnx"], "missing.onnx: no such file"),
])
def test_eval_model_mistakes_are_one_line(tmp_path, args, message):
    cfg, _, _ = classifier(tmp_path)
    res = invoke("eval", "--config", cfg, *args, code=2)
    assert message in res.output and "Traceback" not in res.output


def test_benchmark_writes_one_table_csv_and_json(tmp_path):
    cfg, ckpt, _ = classifier(tmp_path)
    out = tmp_path / "bench"
    res = invoke("benchmark", "--config", cfg, "--checkpoint", ckpt, "--formats", "eager,pt2,onnx,onnx-int8",
                 "--batch", "4", "--warmup", "1", "--repeats", "2", "--calib-images", "4", "--out", str(out))
    assert "\nmachine: " in res.output and "load average" in res.output
    info = json.load(open(out / "benchmark.json"))
    rows = {r["format"]: r for r in info["rows"]}
    assert list(rows) == ["eager", "pt2", "onnx", "onnx-int8"] and info["machine"]["cores"] >= 1
    for r in rows.values():
        assert r["ms_per_image_b1"] > 0 and r["images_per_s"] > 0 and r["metric"] == "top1" and r["batch"] == 4
    # the same weights give the same top-1 in every fp32 format
    assert rows["eager"]["value"] == rows["pt2"]["value"] == rows["onnx"]["value"]
    assert rows["onnx-int8"]["size_mb"] < rows["onnx"]["size_mb"]
    csv_lines = open(out / "benchmark.csv").read().splitlines()
    assert csv_lines[0].startswith("format,size_mb,ms_per_image_b1") and len(csv_lines) == 5


def test_benchmark_refuses_an_unknown_format(tmp_path):
    cfg, ckpt, _ = classifier(tmp_path)
    res = invoke("benchmark", "--config", cfg, "--checkpoint", ckpt, "--formats", "eager,tensorrt", code=2)
    assert "--formats" in res.output and "tensorrt" in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("fmt", ["onnx",  # pt2 and torchscript: the same path, left to the slow run (6-20 s each)
                                 pytest.param("pt2", marks=pytest.mark.slow),
                                 pytest.param("torchscript", marks=pytest.mark.slow)])
def test_dynamic_size_export_runs_at_sizes_it_was_not_traced_at(tmp_path, fmt):
    cfg, ckpt, model = classifier(tmp_path)
    out = str(tmp_path / f"cls.{fmt}")
    invoke("export", "--config", cfg, "--checkpoint", ckpt, "--format", fmt, "--out", out, "--dynamic-size")
    record = json.load(open(out + ".json"))
    assert record["input"]["shape"] == ["batch", 1, "height", "width"] and record["dynamic_size"] is True
    assert record["verified_sizes"] == [[16, 16], [32, 32]] and record["max_error"] <= 1e-4
    from up_trainer.export.runtime import ExportedModel

    loaded = ExportedModel(out)
    for size in ((24, 20), (40, 48)):  # neither the traced nor a verified size
        x = torch.rand(2, 1, *size)
        with torch.no_grad():
            want = model({"image": x})["logits"]
        assert torch.allclose(loaded({"image": x})["logits"], want, atol=1e-4)


def test_without_dynamic_size_the_onnx_file_keeps_its_size(tmp_path):
    cfg, ckpt, _ = classifier(tmp_path)
    out = str(tmp_path / "cls.onnx")
    invoke("export", "--config", cfg, "--checkpoint", ckpt, "--out", out)
    import onnx

    dims = onnx.load(out).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[2:]] == [16, 16]


@pytest.mark.slow  # torch.compile of a ResNet-18 takes 30-90 s on 2 loaded cores
def test_benchmark_compile_and_torchscript_rows(tmp_path):
    cfg, ckpt, _ = classifier(tmp_path)
    out = tmp_path / "bench"
    invoke("benchmark", "--config", cfg, "--checkpoint", ckpt, "--formats", "eager,compile,torchscript",
           "--batch", "4", "--warmup", "1", "--repeats", "2", "--out", str(out))
    rows = {r["format"]: r for r in json.load(open(out / "benchmark.json"))["rows"]}
    assert list(rows) == ["eager", "compile", "torchscript"]
    for r in rows.values():
        assert "failed" not in r.get("note", ""), r
        assert r["ms_per_image_b1"] > 0 and r["images_per_s"] > 0 and r["metric"] == "top1"
    assert rows["eager"]["value"] == rows["compile"]["value"] == rows["torchscript"]["value"]
    assert rows["compile"]["size_mb"] == rows["eager"]["size_mb"] and (out / "model.pt").is_file()
