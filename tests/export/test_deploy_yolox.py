"""A trained digits YOLOX as a deployed ONNX file: the end-to-end graph predicts what the
checkpoint predicts on the val scenes and evaluates to the same AP."""
import json

import pytest
import yaml

from conftest import invoke

pytest.importorskip("onnxruntime")

SCENES = {"canvas_size": 64, "digits_per_image": [1, 3], "scale_range": [12, 24], "noise": 0.05}


def _ok(args):
    res = invoke([str(a) for a in args])
    assert res.exit_code == 0, res.stderr
    return res


@pytest.mark.slow  # about a minute on 2 cores: one short training epoch, an export, two evals, two predicts
def test_yolox_end_to_end_onnx_matches_predict_and_eval(tmp_path):
    cfg = {"runtime": {"seed": 0, "num_threads": 1},
           "dataset": {"train": {"type": "digits_det", "kwargs": {"split": "train", "num_images": 96, "seed": 0,
                                                                  **SCENES}},
                       "test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 24, "seed": 1,
                                                                 **SCENES}},
                       "batch_size": 16, "test_batch_size": 8, "num_workers": 0},
           "trainer": {"max_epoch": 2, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.02, "momentum": 0.9}}},
           "saver": {"save_dir": "checkpoints", "results_dir": str(tmp_path / "results")},
           "net": {"type": "yolox", "kwargs": {"size": "nano", "num_classes": 10, "score_thresh": 0.05}}}
    path = tmp_path / "yolox.yaml"
    path.write_text(yaml.safe_dump(cfg))
    _ok(["train", "--config", path, "--work-dir", tmp_path / "run"])
    ckpt = tmp_path / "run" / "checkpoints" / "ckpt_e2.pth"
    onnx = tmp_path / "yolox.onnx"
    _ok(["export", "--config", path, "--checkpoint", ckpt, "--form", "end2end", "--out", onnx])
    record = json.load(open(str(onnx) + ".json"))
    assert record["form"] == "end2end" and record["max_error"] <= record["tolerance"]

    _ok(["eval", "--config", path, "--checkpoint", ckpt])
    want = json.load(open(tmp_path / "results" / "metrics.json"))
    _ok(["eval", "--config", path, "--model", onnx])
    got = json.load(open(tmp_path / "results" / "metrics.json"))
    assert got["bbox.AP"] == pytest.approx(want["bbox.AP"], abs=1e-4) and got["bbox.AP50"] == pytest.approx(
        want["bbox.AP50"], abs=1e-4)

    _ok(["data", "digits-det", "--out", tmp_path / "scenes", "--num-images", 1, "--num-val-images", 24,
         "--seed", 1])
    preds = {}
    for name, flag, target in (("ckpt", "--checkpoint", ckpt), ("onnx", "--model", onnx)):
        _ok(["predict", "--config", path, flag, target, "--input", tmp_path / "scenes" / "images" / "val",
             "--out", tmp_path / name, "--score-thr", 0.1])
        preds[name] = [json.loads(line) for line in open(tmp_path / name / "predictions.jsonl")]
    assert sum(len(r["boxes"]) for r in preds["ckpt"]) > 0
    for a, b in zip(preds["ckpt"], preds["onnx"]):
        assert a["labels"] == b["labels"] and len(a["boxes"]) == len(b["boxes"])
        for box_a, box_b in zip(a["boxes"], b["boxes"]):  # rounded to 0.01 px in the file
            assert max(abs(x - y) for x, y in zip(box_a, box_b)) <= 0.02
        assert max((abs(x - y) for x, y in zip(a["scores"], b["scores"])), default=0) <= 2e-4
