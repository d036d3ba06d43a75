"""LR schedules: warmup curves against their formulas, epoch -> update conversion, UP's
polylr, cosine with floor, UP lr scaling, exact state_dict resume, config errors."""
import math

import pytest
import torch
from torch import nn

from up_trainer.engine.lr_schedulers import build_lr_scheduler
from up_trainer.engine.optim import Optimization
from up_trainer.engine.schedule import Schedule
from up_trainer.errors import ConfigError


def make(cfg, lr=0.1, upe=10, max_epoch=5, groups=1, **kw):
    params = [nn.Parameter(torch.zeros(1)) for _ in range(groups)]
    opt = torch.optim.SGD([{"params": [p], "lr": lr * (i + 1)} for i, p in enumerate(params)], lr=lr, momentum=0.9)
    sched = build_lr_scheduler(opt, cfg, upe, max_epoch, **kw)
    return opt, sched


def curve(opt, sched, n, group=0):
    """lr used by updates 0..n-1."""
    out = []
    for _ in range(n):
        out.append(opt.param_groups[group]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("wtype", ["linear", "exp", "cos"])
def test_warmup_curve_matches_formula(wtype):
    w, start, target = 12, 0.1 * 0.01, 0.1
    opt, sched = make({"type": "MultiStepLR", "kwargs": {"milestones": [3]}, "warmup_iter": w,
                       "warmup_type": wtype, "warmup_ratio": 0.01})
    lrs = curve(opt, sched, 40)
    for t in (0, 1, 5, 7, 11):
        r = t / (w - 1)
        want = {"linear": start + (target - start) * r,
                "exp": start * (target / start) ** r,
                "cos": start + (target - start) * (1 - math.cos(math.pi * r)) / 2}[wtype]
        assert lrs[t] == pytest.approx(want, rel=1e-12), t
    assert lrs[11] == pytest.approx(target)
    # after warmup the main schedule (milestone at epoch 3 = update 30) takes over, counted from 0
    assert lrs[12] == lrs[29] == pytest.approx(0.1)
    assert lrs[30] == pytest.approx(0.01)


def test_warmup_epochs_vs_iter_takes_the_larger_and_groups_keep_their_ratio():
    opt, sched = make({"type": "constant", "warmup_epochs": 0.5, "warmup_iter": 3, "warmup_ratio": 0.5},
                      groups=2)
    assert sched.warmup_iter == 5
    g1 = curve(opt, sched, 6, group=1)
    assert g1[0] == pytest.approx(0.1) and g1[4] == pytest.approx(0.2) and g1[5] == pytest.approx(0.2)


def test_epoch_kwargs_become_updates():
    opt, sched = make({"type": "MultiStepLR", "kwargs": {"milestones": [1, 2.5], "gamma": 0.5}}, upe=4)
    lrs = curve(opt, sched, 12)
    assert lrs[3] == pytest.approx(0.1) and lrs[4] == pytest.approx(0.05)
    assert lrs[9] == pytest.approx(0.05) and lrs[10] == pytest.approx(0.025)
    opt, sched = make({"type": "StepLR", "kwargs": {"step_size": 2, "gamma": 0.1}}, upe=3)
    lrs = curve(opt, sched, 7)
    assert lrs[5] == pytest.approx(0.1) and lrs[6] == pytest.approx(0.01)
    opt, sched = make({"type": "ExponentialLR", "kwargs": {"gamma": 0.5}}, upe=4)  # gamma per epoch
    assert curve(opt, sched, 9)[8] == pytest.approx(0.1 * 0.25)
    # torch's CosineAnnealingLR: T_max in epochs, default max_epoch
    opt, sched = make({"type": "CosineAnnealingLR", "kwargs": {"eta_min": 0.0}}, upe=4, max_epoch=3)
    lrs = curve(opt, sched, 13)
    assert lrs[6] == pytest.approx(0.05) and lrs[12] == pytest.approx(0.0, abs=1e-12)


def test_polylr_and_cosine_with_floor():
    opt, sched = make({"type": "polylr", "kwargs": {"power": 2.0, "min_lr": 0.01}}, upe=5, max_epoch=4)
    lrs = curve(opt, sched, 25)
    for t in (0, 7, 19):
        assert lrs[t] == pytest.approx((0.1 - 0.01) * (1 - t / 20) ** 2 + 0.01)
    assert lrs[20] == pytest.approx(0.01) and lrs[24] == pytest.approx(0.01)
    opt, sched = make({"type": "polylr", "kwargs": {"max_epoch": 2}}, upe=5, max_epoch=4)  # UP's kwarg
    assert curve(opt, sched, 6)[5] == pytest.approx(0.05)
    w, total = 4, 20
    opt, sched = make({"type": "cosine", "kwargs": {"min_lr_ratio": 0.1}, "warmup_iter": w, "warmup_ratio": 0.1},
                      upe=5, max_epoch=4)
    lrs = curve(opt, sched, 26)
    for t in (4, 9, 15):
        want = 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * (t - w) / (total - w))) / 2
        assert lrs[t] == pytest.approx(want)
    assert lrs[4] == pytest.approx(0.1)  # the cosine starts where warmup ends: no jump
    assert lrs[20] == pytest.approx(0.01) and lrs[25] == pytest.approx(0.01)


def test_up_lr_scaling_and_the_default():
    # default: lr as written, warmup from 0.001 x lr
    opt, sched = make({"type": "constant", "warmup_iter": 5}, world_size=4, batch_size=8)
    lrs = curve(opt, sched, 6)
    assert lrs[0] == pytest.approx(1e-4) and lrs[5] == pytest.approx(0.1)
    # UP "base": lr per image x world_size x images per update; warmup from the written lr
    opt, sched = make({"type": "constant", "warmup_iter": 5, "warmup_register_type": "base"}, lr=0.001,
                      world_size=4, batch_size=8)
    lrs = curve(opt, sched, 6)
    assert lrs[0] == pytest.approx(0.001) and lrs[4] == pytest.approx(0.032) and lrs[5] == pytest.approx(0.032)
    # without warmup the scaled lr applies at once
    opt, sched = make({"type": "constant", "warmup_register_type": "base"}, lr=0.001, world_size=2, batch_size=8)
    assert curve(opt, sched, 1) == [pytest.approx(0.016)]


def test_optimization_counts_updates_and_scales_by_images_per_update():
    model = nn.Linear(2, 1)
    tcfg = {"optimizer": {"type": "SGD", "kwargs": {"lr": 0.001}}, "accumulate": 4, "max_epoch": 2,
            "lr_scheduler": {"type": "MultiStepLR", "kwargs": {"milestones": [1]}, "warmup_register_type": "base"}}
    optim = Optimization(model, tcfg, {}, torch.device("cpu"), Schedule(tcfg, 9), batch_size=8, world_size=2)
    assert optim.updates_per_epoch == 3  # 4 + 4 + the short last group of 1
    assert optim.lr() == pytest.approx(0.001 * 2 * 8 * 4)
    lrs = []
    for epoch_iter in range(9):
        model(torch.ones(1, 2)).sum().backward()
        if optim.is_update(epoch_iter, 9):
            lrs.append(optim.lr())
            optim.step()
    assert lrs == [pytest.approx(0.064)] * 3
    assert optim.lr() == pytest.approx(0.0064)  # milestone: epoch 1 = 3 updates


@pytest.mark.parametrize("cfg", [
    {"type": "MultiStepLR", "kwargs": {"milestones": [1, 2]}, "warmup_iter": 7, "warmup_type": "exp"},
    {"type": "OneCycleLR", "kwargs": {"max_lr": 0.5}},
    {"type": "CosineAnnealingWarmRestarts", "kwargs": {"T_0": 1, "T_mult": 2}, "warmup_epochs": 0.5},
    {"type": "polylr", "warmup_iter": 4, "warmup_type": "cos"},
])
def test_state_dict_resume_is_exact(cfg):
    opt, sched = make(cfg, upe=6, max_epoch=4, groups=2)
    straight = curve(opt, sched, 23, group=1)
    opt, sched = make(cfg, upe=6, max_epoch=4, groups=2)
    first = curve(opt, sched, 9, group=1)
    saved = {"opt": opt.state_dict(), "sched": sched.state_dict()}
    opt, sched = make(cfg, upe=6, max_epoch=4, groups=2)
    opt.load_state_dict(saved["opt"])
    sched.load_state_dict(saved["sched"])
    assert first + curve(opt, sched, 14, group=1) == straight  # bitwise, not approx


@pytest.mark.parametrize("cfg, match", [
    ({"type": "MultiStepLRR"}, r"type: unknown lr scheduler 'MultiStepLRR'.*did you mean 'MultiStepLR'"),
    ({"type": "ReduceLROnPlateau"}, "needs a metric"),
    ({"type": "StepLR", "kwargs": {"step_sz": 1}}, r"kwargs\.step_sz: unknown argument"),
    ({"type": "polylr", "kwargs": {"updates_per_epoch": 2}}, r"kwargs\.updates_per_epoch: set by the trainer"),
    ({"type": "StepLR", "kwargs": {"step_size": 1}, "warmup_typ": "exp"}, r"warmup_typ: unknown key"),
    ({"type": "StepLR", "kwargs": {"step_size": 1}, "warmup_type": "quad"}, "use linear, exp or cos"),
    ({"type": "constant", "warmup_register_type": "scale"}, "no_scale_lr"),
    ({"type": "constant", "warmup_iter": 3, "warmup_type": "exp", "warmup_ratio": 0}, "start lr > 0"),
])
def test_config_errors(cfg, match):
    with pytest.raises(ConfigError, match=match):
        make(cfg)
