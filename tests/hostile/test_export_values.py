"""`up export` on weights that give NaN or inf: never "verified, max error 0". NaN compares as
neither larger nor smaller than anything, so it used to slip through the largest-error check."""
import math

import pytest
import torch
import yaml

from conftest import invoke
from optim_helpers import digits_cfg  # noqa: F401  (registers test_mlp)


def nan_checkpoint(tmp_path, value):
    from up_trainer.config import resolve_config
    from up_trainer.tasks.net import build_model

    cfg = {"runtime": {"num_threads": 1}, "trainer": {"max_epoch": 1},
           "dataset": {"test": {"type": "digits", "kwargs": {"split": "test", "subset": 4}}},
           "net": {"type": "test_mlp", "kwargs": {"in_features": 64, "num_classes": 10}}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    weights = build_model(resolve_config(str(path))["net"]).state_dict()
    weights["backbone.3.weight"][2, 0] = value  # one weight of class 2's logit
    torch.save(weights, tmp_path / "w.pth")
    return str(path), str(tmp_path / "w.pth")


@pytest.mark.parametrize("value", [math.nan, math.inf], ids=["nan", "inf"])
def test_non_finite_weights_fail_the_verification(tmp_path, value):
    cfg, ckpt = nan_checkpoint(tmp_path, value)
    res = invoke(["export", "--config", cfg, "--checkpoint", ckpt, "--format", "torchscript",
                  "--input-size", "1,8,8", "--out", tmp_path / "m.pt"])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 1 and len(lines) == 1, (res.exit_code, res.stderr, res.stdout[-500:])
    assert lines[0].startswith("up: error: export verification failed: output 'logits' at batch size 1 has "
                               "non-finite values (NaN or inf): 1 of 10 in the PyTorch model, 1 of 10 in the "
                               "exported file"), lines[0]
    assert "verified" not in res.stdout


def test_non_finite_only_in_the_exported_file():
    from up_trainer.export.verify import ExportMismatch, detections_error, tensors_error

    want = [torch.zeros(3, 4)]
    got = [torch.tensor([[0.0, math.nan, 0.0, math.inf]] * 3)]
    with pytest.raises(ExportMismatch, match=r"output 'scores' at batch size 3 has non-finite values \(NaN or inf\): "
                       r"6 of 12 in the exported file; the export changed the computation"):
        tensors_error(got, want, ["scores"], 3)
    dets = [{"boxes": torch.tensor([[1.0, 2.0, 3.0, math.nan]]), "scores": torch.tensor([0.5]),
             "labels": torch.tensor([1])}]
    with pytest.raises(ExportMismatch, match=r"output 'detections\[0\].boxes' at batch size 1 .*1 of 4 in the "
                       r"exported file"):
        detections_error(dets, [dict(dets[0], boxes=torch.ones(1, 4))], 1)
