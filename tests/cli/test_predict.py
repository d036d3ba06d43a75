"""up predict: JSONL + PNGs with drawn boxes (detection) or captions (classification)."""
import json

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner
from PIL import Image

from up_trainer.cli import main
from up_trainer.config import resolve_config
from up_trainer.tasks.net import build_model

SCENES = {"canvas_size": 48, "digits_per_image": [1, 2], "scale_range": [10, 16]}


@pytest.fixture()
def det_setup(tmp_path):
    cfg = {"runtime": {"num_threads": 1},
           "dataset": {"test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 2, **SCENES}}},
           "trainer": {"max_epoch": 1},
           "net": {"type": "fcos", "kwargs": {"num_classes": 10, "backbone": "resnet18", "returned_layers": [2, 3],
                                              "fpn_extra": "none", "fpn_channels": 32, "head_convs": 1,
                                              "min_size": 48, "max_size": 48, "detections_per_img": 60}}}
    cfg_path = tmp_path / "det.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    torch.manual_seed(0)
    model = build_model(resolve_config(str(cfg_path))["net"])
    # A confident "digit 3" everywhere, each box reaching one stride from its location in all
    # four directions: 16x16 squares on the stride-8 grid, well above any threshold.
    with torch.no_grad():
        head = model.head
        for conv in (head.classification_head.cls_logits, head.regression_head.bbox_reg,
                     head.regression_head.bbox_ctrness):
            conv.weight.zero_()
        head.classification_head.cls_logits.bias.fill_(-10.0)
        head.classification_head.cls_logits.bias[4] = 10.0  # logit index = label: label 4 is digit "3"
        head.regression_head.bbox_reg.bias.fill_(1.0)
        head.regression_head.bbox_ctrness.bias.fill_(10.0)
    ckpt = tmp_path / "weights.pth"
    torch.save(model.state_dict(), ckpt)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(2):
        pixels = np.zeros((48, 48, 3), np.uint8)
        pixels[10 + i:30, 12:28] = 200
        Image.fromarray(pixels).save(inputs / f"img{i}.png")
    return str(cfg_path), str(ckpt), inputs


def test_predict_detection_writes_jsonl_and_drawn_pngs(tmp_path, det_setup):
    cfg, ckpt, inputs = det_setup
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["predict", "--config", cfg, "--checkpoint", ckpt, "--input", str(inputs),
                                    "--out", str(out), "--score-thr", "0.5"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    lines = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert [x["file"].rsplit("/", 1)[-1] for x in lines] == ["img0.png", "img1.png"]
    rec = lines[0]
    assert rec["boxes"] and len(rec["boxes"]) == len(rec["scores"]) == len(rec["labels"]) <= 60
    assert set(rec["labels"]) == {4} and set(rec["classes"]) == {"3"} and min(rec["scores"]) >= 0.5
    drawn = np.asarray(Image.open(out / "img0.png.png").convert("RGB")).astype(int)
    factor = drawn.shape[0] // 48
    assert factor >= 2  # tiny inputs are drawn enlarged
    original = np.asarray(Image.open(inputs / "img0.png").convert("RGB")).repeat(factor, 0).repeat(factor, 1)
    changed = np.abs(drawn - original).sum(axis=2) > 0
    inside = [b for b in rec["boxes"] if min(b) > 0 and max(b) < 48]
    assert inside and all(b[2] - b[0] == pytest.approx(16) for b in inside)
    x1, y1, x2, y2 = (int(round(v * factor)) for v in inside[0])
    assert changed[y1:y2 + 1, x1].mean() > 0.9 and changed[y1:y2 + 1, x2].mean() > 0.9  # the box's sides
    assert not changed.all()  # only the boxes, not the whole image


def test_predict_single_file_threshold_and_bad_input(tmp_path, det_setup):
    cfg, ckpt, inputs = det_setup
    out = tmp_path / "o"
    res = CliRunner().invoke(main, ["predict", "--config", cfg, "--checkpoint", ckpt, "--input",
                                    str(inputs / "img1.png"), "--out", str(out), "--score-thr", "1.0"])
    assert res.exit_code == 0, res.output
    rec = json.loads((out / "predictions.jsonl").read_text())
    assert rec["boxes"] == [] and (out / "img1.png.png").exists()
    res = CliRunner().invoke(main, ["predict", "--config", cfg, "--checkpoint", ckpt, "--input",
                                    str(tmp_path / "missing"), "--out", str(out)])
    assert res.exit_code == 2 and "no such file" in res.output


def test_predict_classification(tmp_path):
    cfg_path = "configs/cls/digits_resnet18.yaml"
    model = build_model(resolve_config(cfg_path)["net"])
    torch.save(model.state_dict(), tmp_path / "w.pth")
    img = tmp_path / "d.png"
    Image.fromarray(np.kron(np.eye(8, dtype=np.uint8) * 255, np.ones((2, 2), np.uint8))).save(img)
    res = CliRunner().invoke(main, ["predict", "--config", cfg_path, "--checkpoint", str(tmp_path / "w.pth"),
                                    "--input", str(img), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    rec = json.loads((tmp_path / "out" / "predictions.jsonl").read_text())
    assert 0 <= rec["label"] < 10 and rec["class"] == str(rec["label"]) and 0 < rec["score"] <= 1
    drawn = np.asarray(Image.open(tmp_path / "out" / "d.png.png").convert("RGB"))
    assert drawn.shape[0] >= 128 and (drawn[:, :, 1] != drawn[:, :, 0]).any()  # colored frame/caption
