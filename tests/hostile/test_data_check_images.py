"""``up data check`` on images that cannot be decoded (a truncated file, one over
runtime.max_image_pixels): findings in report.json and the summary, the check goes on; the
contact sheet leaves their panels out."""
import json
import os

import pytest

from conftest import invoke, write_cfg
from format_fixtures import det_cfg, digits_coco


def coco_set(root, max_pixels=None, truncate=None):
    splits = digits_coco(str(root), num_images=6, num_val_images=3, seed=2)
    (_, train_dir, train_ann), (_, val_dir, val_ann) = splits["train"], splits["val"]
    if truncate:
        path = os.path.join(train_dir, truncate)
        data = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write(data[:len(data) // 2])
    cfg = det_cfg({"type": "coco", "kwargs": {"ann_file": train_ann, "img_dir": train_dir}},
                  {"type": "coco", "kwargs": {"ann_file": val_ann, "img_dir": val_dir}})
    if max_pixels is not None:
        cfg["runtime"]["max_image_pixels"] = max_pixels
    return write_cfg(os.path.join(str(root), "cfg.yaml"), cfg), train_dir


def unreadable(report):
    return [f for f in report["findings"] if f["check"] == "unreadable"]


@pytest.mark.parametrize("decode", [False, True])
def test_a_truncated_image_is_a_finding(tmp_path, decode):
    cfg, train_dir = coco_set(tmp_path / "data", truncate="000002.png")
    out = tmp_path / "report"
    result = invoke(["data", "check", "--config", cfg, "--out", out, *(["--decode"] if decode else [])])
    assert result.exit_code == 0, (result.stderr, result.exception)
    found = unreadable(json.loads((out / "report.json").read_text()))
    assert len(found) == 1, found  # once, whether --decode read it first or the contact sheet did
    assert found[0]["level"] == "error" and found[0]["split"] == "train"
    assert f"cannot read image {os.path.join(train_dir, '000002.png')}" in found[0]["message"]
    assert f"error: [train] unreadable: {found[0]['message']}" in result.stdout
    assert (out / "train_samples.png").stat().st_size > 2000  # the other images' panels


def test_images_over_max_image_pixels_are_findings_and_strict_exits_2(tmp_path):
    cfg, _ = coco_set(tmp_path / "data", max_pixels=48 * 48 - 1)  # every 48 x 48 scene is over
    out = tmp_path / "report"
    result = invoke(["data", "check", "--config", cfg, "--out", out])
    assert result.exit_code == 0, (result.stderr, result.exception)
    report = json.loads((out / "report.json").read_text())
    found = unreadable(report)
    assert found and all("more than runtime.max_image_pixels (2303)" in f["message"] for f in found)
    assert "train_samples.png" not in report["files"] and not (out / "train_samples.png").exists()
    strict = invoke(["data", "check", "--config", cfg, "--out", tmp_path / "strict", "--strict"])
    assert strict.exit_code == 2 and "Traceback" not in strict.stderr
    assert any("more than runtime.max_image_pixels" in line for line in strict.stderr.splitlines())
    assert (tmp_path / "strict" / "report.json").exists()
