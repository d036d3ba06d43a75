"""UP-form files get UP's warmup and lr-scaling defaults, explicitly and printed by up config;
native files keep ours. A UP-form trainer section then builds UP's lrs and param groups."""
import math
import os

import pytest
import torch
from torch import nn

from conftest import REPO, UP_FIXTURES
from up_trainer.config import resolve_config
from up_trainer.engine.optim import Optimization
from up_trainer.engine.schedule import Schedule

UP_TRAINER = """
runtime: {task_names: cls}
dataset:
  train: {dataset: {type: digits, kwargs: {split: train}}}
trainer:
  max_epoch: 2
  optimizer:
    type: SGD
    kwargs: {lr: 0.01, momentum: 0.9, weight_decay: 0.0001}
    pconfig:
      bn_w: {type: weight, kwargs: {weight_decay: 0.0}}
      bn_b: {type: bias, kwargs: {weight_decay: 0.0}}
  lr_scheduler:
    warmup_iter: 4
    type: MultiStepLR
    kwargs: {milestones: [1]}
net:
  - name: backbone
    type: resnet18
    kwargs: {}
"""
NATIVE = """
dataset:
  train: {type: digits, kwargs: {split: train}}
trainer:
  max_epoch: 2
  lr_scheduler: {warmup_iter: 4, type: MultiStepLR, kwargs: {milestones: [1]}}
net: {type: resnet18, kwargs: {num_classes: 10}}
"""


def write(tmp_path, text, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_up_form_gets_ups_defaults_recorded_in_origin(tmp_path):
    cfg = resolve_config(write(tmp_path, UP_TRAINER))
    sched = cfg["trainer"]["lr_scheduler"]
    assert (sched["warmup_type"], sched["warmup_register_type"], sched["warmup_ratio"]) == ("exp", "base", -1)
    notes = "\n".join(cfg["origin"]["notes"])
    for key in ("warmup_type: exp", "warmup_register_type: base", "warmup_ratio: -1"):
        assert f"trainer.lr_scheduler.{key} (UP default" in notes


def test_written_keys_and_opts_win_and_native_keeps_its_defaults(tmp_path):
    det = resolve_config(os.path.join(UP_FIXTURES, "det", "retinanet-r50_1x.yaml"))
    sched = det["trainer"]["lr_scheduler"]
    assert (sched["warmup_type"], sched["warmup_ratio"], sched["warmup_register_type"]) == ("linear", 0.001, "base")
    cfg = resolve_config(write(tmp_path, UP_TRAINER), ["trainer.lr_scheduler.warmup_register_type=no_scale_lr"])
    assert cfg["trainer"]["lr_scheduler"]["warmup_register_type"] == "no_scale_lr"
    native = resolve_config(write(tmp_path, NATIVE))
    assert not {"warmup_type", "warmup_register_type", "warmup_ratio"} & set(native["trainer"]["lr_scheduler"])


def test_up_config_prints_the_defaults(tmp_path, run_up):
    res = run_up(["config", "--config", write(tmp_path, UP_TRAINER)])
    assert res.exit_code == 0, res.stderr
    header = [line for line in res.stdout.splitlines() if line.startswith("#")]
    assert any("UP form" in line for line in header)
    assert any("warmup_register_type: base (UP default" in line for line in header)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(2, 3)


def test_up_form_trainer_builds_ups_lrs_and_groups(tmp_path):
    """UP: lr x world_size x batch, exp warmup from the written lr, pconfig per tensor."""
    cfg = resolve_config(write(tmp_path, UP_TRAINER))
    model = Net()
    optim = Optimization(model, cfg["trainer"], cfg["runtime"], torch.device("cpu"), Schedule.of_run(cfg, 5), batch_size=8,
                         world_size=2)
    written, target, w = 0.01, 0.01 * 2 * 8, 4
    names = {id(p): n for n, p in model.named_parameters()}
    wd = {names[id(p)]: g["weight_decay"] for g in optim.optimizer.param_groups for p in g["params"]}
    assert wd == {"conv.weight": 1e-4, "conv.bias": 1e-4, "bn.weight": 0.0, "bn.bias": 0.0,
                  "fc.weight": 1e-4, "fc.bias": 1e-4}
    lrs = []
    for _ in range(7):
        lrs.append(optim.lr())
        optim.step()
    for t in range(w):
        assert lrs[t] == pytest.approx(written * (target / written) ** (t / (w - 1)), rel=1e-12)
    assert lrs[4] == pytest.approx(target) and lrs[5] == pytest.approx(target * 0.1)  # milestone: epoch 1
    assert math.isclose(optim.optimizer.param_groups[0]["lr"], target * 0.1)
