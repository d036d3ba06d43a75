"""UP's LR schedulers and warmups: the lr of every update of a small schedule against UP's
formulas, written out here from UP's definitions (t = update index, n = updates per epoch)."""
import logging
import math

import pytest
import torch
from torch import nn

from up_trainer.engine.lr_schedulers import build_lr_scheduler
from up_trainer.errors import ConfigError
from conftest import UP_FIXTURES  # noqa: E402


def make(cfg, lr=0.1, upe=4, max_epoch=6, groups=1, momentum=0.9, **kw):
    params = [nn.Parameter(torch.zeros(1)) for _ in range(groups)]
    opt = torch.optim.SGD([{"params": [p], "lr": lr * (i + 1)} for i, p in enumerate(params)], lr=lr,
                          momentum=momentum)
    return opt, build_lr_scheduler(opt, cfg, upe, max_epoch, **kw)


def run(opt, sched, n):
    """(lr of every group, momentum of group 0) used by updates 0..n-1."""
    lrs, moms = [], []
    for _ in range(n):
        lrs.append([g["lr"] for g in opt.param_groups])
        moms.append(opt.param_groups[0]["momentum"])
        opt.step()
        sched.step()
    return lrs, moms


def yolov5_factor(x, epochs, floor):
    return ((1 + math.cos(x * math.pi / epochs)) / 2) * (1 - floor) + floor


def test_cosine_lr_epoch_scheduler():
    n, w, target, start, eta = 4, 4, 0.1, 0.01, 0.001
    opt, sched = make({"type": "CosineLREpochScheduler", "kwargs": {"T_max": 6, "eta_min": eta, "warm_epoch": 1},
                       "warmup_iter": w, "warmup_type": "linear", "warmup_ratio": 0.1})
    lrs, _ = run(opt, sched, 6 * n)
    for t, (lr,) in enumerate(lrs):
        if t < w:
            want = start + (target - start) / (w - 1) * t
        else:
            want = eta + (target - eta) * (1 + math.cos(math.pi * (t // n - 1) / 6)) / 2
        assert lr == pytest.approx(want, rel=1e-12, abs=1e-15), t


def test_up_cosine_annealing_is_shifted_by_its_warmup_iter():
    n, w, target, eta = 4, 5, 0.1, 0.002
    opt, sched = make({"type": "CosineAnnealingLR", "kwargs": {"T_max": 3, "eta_min": eta, "warmup_iter": w},
                       "warmup_iter": w, "warmup_type": "exp", "warmup_ratio": 0.01})
    lrs, _ = run(opt, sched, 3 * n + 3)  # past T_max the closed form keeps going, as in UP
    start = target * 0.01
    for t, (lr,) in enumerate(lrs):
        if t < w:
            want = start * (target / start) ** (t / (w - 1))
        else:
            want = eta + (target - eta) * (1 + math.cos(math.pi * (t - w) / (3 * n - w))) / 2
        assert lr == pytest.approx(want, rel=1e-12), t
    assert lrs[w][0] == pytest.approx(target) and lrs[3 * n][0] == pytest.approx(eta)


def test_epoch_based_cosine_annealing_eta_min_is_a_scale():
    n, base = 3, 0.1
    opt, sched = make({"type": "EpochBasedCosineAnnealingLR", "kwargs": {"T_max": 5, "eta_min": 0.2,
                                                                         "offset_epoch": 1}}, upe=n)
    lrs, _ = run(opt, sched, 5 * n)
    for t, (lr,) in enumerate(lrs):
        assert lr == pytest.approx(base * yolov5_factor(t // n + 1, 5, 0.2), rel=1e-12), t


def test_yolov5_cosine_with_yolov5_warmup_groups_and_momentum():
    n, w, scale, groups = 3, 7, 2 * 4, 4
    cfg = {"type": "YoloV5CosineLR", "kwargs": {"T_max": 5, "min_lr_scale": 0.2},
           "warmup_register_type": "yolov5", "warmup_type": "yolov5linear", "warmup_iter": w, "warmup_epochs": 1,
           "warmup_total_epochs": 5, "warmup_group_init_lr": [0.0, 0.05, 0.1], "warmup_weight_decay": True,
           "warmup_weight_decay_range": [0.8, 0.9], "min_lr_scale": 0.2}
    opt, sched = make(cfg, upe=n, groups=groups, world_size=2, batch_size=4)
    lrs, moms = run(opt, sched, 5 * n)
    targets = [0.1 * (g + 1) * scale for g in range(groups)]
    inits = [0.0, 0.0, 0.05, 0.1]  # UP pads the front with zeros up to the number of groups

    def warm(g, t):  # numpy.interp(t, [0, w], [init, target * factor(epoch)])
        end = targets[g] * yolov5_factor(t // n, 5, 0.2)
        return inits[g] + (end - inits[g]) * t / w

    for t, row in enumerate(lrs):
        for g, lr in enumerate(row):
            # after warmup UP's cosine multiplies the lr warmup stopped at, not the target
            want = warm(g, t) if t < w else warm(g, w - 1) * yolov5_factor(t // n, 5, 0.2)
            assert lr == pytest.approx(want, rel=1e-12, abs=1e-15), (t, g)
        want_m = 0.8 + 0.1 * min(t, w - 1) / w  # momentum warms up, then stays where warmup left it
        assert moms[t] == pytest.approx(want_m, rel=1e-12), t


def test_yolox_cosine_with_yolox_warmup_and_no_aug_tail():
    n, scale, floor = 5, 2 * 3, 0.05
    cfg = {"type": "YoloXCosineLR", "kwargs": {"T_max": 6, "min_lr_scale": floor, "no_aug_epoch": 1},
           "lr_register_type": "yolox_base", "warmup_epochs": 1, "warmup_type": "yolox_cos",
           "warmup_register_type": "base"}
    opt, sched = make(cfg, lr=0.01, upe=n, world_size=2, batch_size=3)
    lrs, _ = run(opt, sched, 6 * n)
    target, w, total, no_aug = 0.01 * scale, n, 6 * n, n
    base = target * ((w - 1) / w) ** 2  # UP's main schedule starts where yolox_cos warmup stopped
    for t, (lr,) in enumerate(lrs):
        if t < w:
            want = target * (t / w) ** 2
        elif t >= total - no_aug:
            want = base * floor
        else:
            low = base * floor
            want = low + 0.5 * (base - low) * (1 + math.cos(math.pi * (t - w) / (total - w - no_aug)))
        assert lr == pytest.approx(want, rel=1e-12, abs=1e-15), t


def test_a_cosine_shorter_than_its_warmup_follows_ups_formula_with_a_warning(caplog):
    """up config builds with one update per epoch: no error; UP's curve, as UP computes it."""
    logging.getLogger("up").addHandler(caplog.handler)  # the CLI may have stopped "up" propagating
    try:
        opt, sched = make({"type": "CosineAnnealingLR", "kwargs": {"T_max": 1, "warmup_iter": 8}}, upe=4)
    finally:
        logging.getLogger("up").removeHandler(caplog.handler)
    assert "minus warmup_iter" in caplog.text
    lrs, _ = run(opt, sched, 3)
    assert [r[0] for r in lrs] == pytest.approx([0.1 * (1 + math.cos(math.pi * (t - 8) / (4 - 8))) / 2
                                                 for t in range(3)])
    opt, sched = make({"type": "YoloXCosineLR", "kwargs": {"T_max": 2, "no_aug_epoch": 2}})
    assert run(opt, sched, 2)[0] == [[0.1 * 0.05]] * 2  # all no-aug: flat at the floor


def test_up_warmup_defaults_start_at_the_written_lr():
    """warmup_ratio -1 (UP's default): warmup starts at the lr as written, even unscaled."""
    opt, sched = make({"type": "MultiStepLR", "kwargs": {"milestones": [2]}, "warmup_iter": 3,
                       "warmup_type": "exp", "warmup_ratio": -1, "warmup_register_type": "base"},
                      world_size=1, batch_size=1)
    lrs, _ = run(opt, sched, 4)
    assert [r[0] for r in lrs] == pytest.approx([0.1] * 4)
    opt, sched = make({"type": "constant", "warmup_iter": 3, "warmup_type": "cosine", "warmup_ratio": -1,
                       "warmup_register_type": "base"}, world_size=2, batch_size=2)
    lrs, _ = run(opt, sched, 4)
    assert [r[0] for r in lrs] == pytest.approx([0.1, 0.25, 0.4, 0.4])


@pytest.mark.parametrize("cfg", [
    {"type": "YoloXCosineLR", "kwargs": {"T_max": 4, "no_aug_epoch": 1}, "warmup_epochs": 1,
     "warmup_type": "yolox_cos", "lr_register_type": "yolox_base"},
    {"type": "YoloV5CosineLR", "kwargs": {"T_max": 4}, "warmup_iter": 5, "warmup_type": "yolov5linear",
     "warmup_register_type": "yolov5", "warmup_weight_decay": True},
    {"type": "CosineAnnealingLR", "kwargs": {"T_max": 4, "warmup_iter": 3}, "warmup_iter": 3},
])
def test_state_dict_resume_is_exact(cfg):
    def fresh():
        return make(cfg, upe=4, max_epoch=4, groups=2, world_size=1, batch_size=2)

    straight = run(*fresh(), 16)
    opt, sched = fresh()
    first = run(opt, sched, 6)
    saved = {"opt": opt.state_dict(), "sched": sched.state_dict()}
    opt, sched = fresh()
    opt.load_state_dict(saved["opt"])
    sched.load_state_dict(saved["sched"])
    rest = run(opt, sched, 10)
    assert (first[0] + rest[0], first[1] + rest[1]) == straight  # bitwise


@pytest.mark.parametrize("cfg, match", [
    ({"type": "CosineAnnealingLR", "kwargs": {"T_max": 1, "warmup_iter": -2}}, r"kwargs\.warmup_iter: expected"),
    ({"type": "constant", "lr_register_type": "yolo"}, r"lr_register_type: unknown 'yolo'"),
    ({"type": "constant", "warmup_type": "yolov5linear", "warmup_group_init_lr": 0.1},
     r"warmup_group_init_lr: invalid value"),
    ({"type": "constant", "warmup_ratio": -0.5}, r"warmup_ratio: expected a number >= 0 \(or -1"),
])
def test_config_errors(cfg, match):
    with pytest.raises(ConfigError, match=match):
        make(cfg)


def test_ups_yolox_file_schedule_and_groups_end_to_end():
    """yolox_small.yaml's trainer section as the trainer builds it (UP form defaults included):
    lr scaled by the total batch (yolox_base), yolox_cos warmup over 5 epochs, cosine to 5%,
    flat for the last 15 (no_aug_epoch) epochs; register_type yolov5's four groups."""
    import os

    from up_trainer.config import resolve_config
    from up_trainer.engine.optim import Optimization
    from up_trainer.engine.schedule import Schedule

    cfg = resolve_config(os.path.join(UP_FIXTURES, "det", "yolox", "yolox_small.yaml"))
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1))
    n, world = 2, 2  # updates per epoch, processes
    optim = Optimization(model, cfg["trainer"], cfg["runtime"], torch.device("cpu"), Schedule.of_run(cfg, n),
                         batch_size=cfg["dataset"]["batch_size"], world_size=world)
    opt, sched = optim.optimizer, optim.lr_scheduler
    assert [len(g["params"]) for g in opt.param_groups] == [1, 2, 3, 0]  # BN weight, conv weights, biases (BN too), rest
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 0.0005, 0.0, 0.0005]
    assert all(g["nesterov"] and g["momentum"] == 0.9 for g in opt.param_groups)
    lrs, _ = run(opt, sched, 300 * n)
    target = 0.00015625 * 8 * world  # lr x batch 8 x 2 processes
    w, total, tail = 5 * n, 300 * n, 15 * n
    base = target * ((w - 1) / w) ** 2
    low = base * 0.05
    for t, row in enumerate(lrs):
        if t < w:
            want = target * (t / w) ** 2
        elif t >= total - tail:
            want = low
        else:
            want = low + 0.5 * (base - low) * (1 + math.cos(math.pi * (t - w) / (total - w - tail)))
        assert row == pytest.approx([want] * 4, rel=1e-12, abs=1e-15), t
    assert lrs[-tail][0] == lrs[-1][0] == pytest.approx(0.00010125, rel=1e-12)  # flat: 0.0025 x 0.81 x 0.05
