"""UP's BigNAS evaluation phases (tasks/up_nets/bignas_accuracy.py): BatchNorm re-estimation
(``calib_bn``) averages the statistics each norm sees over the calibration batches, weighted by
their image count, and ``up eval`` on UP's sample_accuracy file evaluates each sampled subnet
of a supernet checkpoint on digit scenes, listing them with the top ones and the Pareto front."""
import json
import os

import torch
from torch import nn

from conftest import UP_FIXTURES, invoke
from test_up_configs import data_opts, up_data  # noqa: F401  (the module's tiny COCO digit scenes)
from up_trainer.config import resolve_config
from up_trainer.tasks.up_nets import build_up_net
from up_trainer.tasks.up_nets.bignas_accuracy import _pareto, calibrate_norms

REL = "nas/bignas/det/bignas_retinanet_R18_sample_accuracy.yaml"
SAMPLE_ACCURACY = os.path.join(UP_FIXTURES, REL)


class ConvNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, batch):
        return self.bn(self.conv(batch["image"]))


def test_calibration_averages_each_batch_statistics_by_image_count():
    torch.manual_seed(0)
    model = ConvNorm()
    batches = [{"image": torch.randn(2, 3, 8, 8) * 3 + 1}, {"image": torch.randn(4, 3, 8, 8)}]
    with torch.no_grad():
        feats = [model.conv(b["image"]) for b in batches]
    means = [f.mean((0, 2, 3)) for f in feats]
    variances = [f.transpose(0, 1).reshape(4, -1).var(1, unbiased=True) for f in feats]
    seen = calibrate_norms(model, batches, lambda b: b)
    assert seen == 6
    assert torch.allclose(model.bn.running_mean, (2 * means[0] + 4 * means[1]) / 6, atol=1e-5)
    assert torch.allclose(model.bn.running_var, (2 * variances[0] + 4 * variances[1]) / 6, atol=1e-5)
    assert model.bn.momentum == 0.1 and model.training and model.bn.training  # put back as they were


def test_pareto_front_keeps_the_subnets_no_other_beats():
    rows = [{"macs": 1, "AP": 0.2}, {"macs": 2, "AP": 0.1}, {"macs": 3, "AP": 0.5}, {"macs": 3, "AP": 0.4}]
    assert _pareto(rows, "AP") == [rows[0], rows[2]]


def test_up_eval_runs_the_sample_accuracy_phase_on_digit_scenes(up_data, tmp_path):  # noqa: F811
    opts = data_opts(REL, up_data)
    cfg = resolve_config(SAMPLE_ACCURACY, opts)
    supernet = build_up_net(cfg["net"])
    ckpt = tmp_path / "supernet.pth"
    torch.save({"model": supernet.state_dict()}, ckpt)
    extra = ["bignas.subnet.subnet_count=2", "bignas.subnet.flops_range=['0.1G','2G']",
             "bignas.subnet.baseline_flops=2G", "dataset.dataloader.kwargs.num_workers=0"]
    res = invoke(["eval", "--config", SAMPLE_ACCURACY, "--checkpoint", str(ckpt), "--work-dir", str(tmp_path / "ev"),
                  "--device", "cpu", "--opts", *opts, *extra])
    assert res.exit_code == 0, res.stderr or res.exception
    log = res.stdout  # up eval logs to the console
    assert "sampled subnet 2/2" in log and "Pareto front" in log and "top 2 by bbox.AP" in log, log[-3000:]
    found = list((tmp_path / "ev").rglob("sampled_subnets.json"))
    assert len(found) == 1, list((tmp_path / "ev").rglob("*"))
    table = json.loads(found[0].read_text())
    assert table["metric"] == "bbox.AP" and len(table["subnets"]) == 2
    rows = table["subnets"]
    assert rows[0]["subnet_settings"] != rows[1]["subnet_settings"]
    assert all(0.1e9 <= r["macs"] <= 2e9 and 0 <= r["bbox.AP"] <= 1 and "bbox.AP.5" in r for r in rows)
    assert table["pareto"] and all(p in rows for p in table["pareto"])
    assert [r["bbox.AP"] for r in table["top"]] == sorted((r["bbox.AP"] for r in rows), reverse=True)


def test_calib_bn_makes_evaluate_subnet_re_estimate_and_the_plain_subnet_not():
    from up_trainer.tasks.up_nets.bignas_accuracy import CalibratedSubnet

    for phase, calibrated in (("evaluate_subnet", True), ("subnet", False)):
        cfg = resolve_config(os.path.join(UP_FIXTURES, f"nas/bignas/det/bignas_retinanet_R18_{phase}.yaml"), [])
        assert isinstance(build_up_net(cfg["net"]), CalibratedSubnet) == calibrated, phase
