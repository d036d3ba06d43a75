"""UP's optimizer side: pconfig in UP's {type, kwargs} form, register_type yolov5 groups, LAMB
against its update rule written out step by step."""
import math

import pytest
import torch
from torch import nn

from up_trainer.engine.lamb import LAMB
from up_trainer.engine.optim import build_optimizer
from up_trainer.errors import ConfigError


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 4, 3, bias=False),
                         nn.LayerNorm(4), nn.Linear(4, 3), nn.BatchNorm1d(3))


def settings(opt, model):
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["lr"], g["weight_decay"]) for g in opt.param_groups for p in g["params"]}


def build(model, **extra):
    return build_optimizer(model, {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
                                   **extra})


def test_pconfig_in_ups_form_follows_ups_rules():
    model = net()
    pconfig = {"bn_w": {"type": "weight", "kwargs": {"weight_decay": 0.0}},
               "linear_b": {"type": "bias", "kwargs": {"weight_decay": 0.0, "lr": 0.3}},
               "ln_w": {"type": "bias", "kwargs": {"lr": 0.7}},  # type, not the key, picks the tensor
               "nodecay": ["ndim_is1"]}
    s = settings(build(model, pconfig=pconfig), model)
    # UP: nodecay first (every 1-d tensor), then the pconfig entry's kwargs on top
    assert s["1.weight"] == (0.1, 0.0)           # bn_w (BatchNorm2d)
    assert s["1.bias"] == (0.1, 0.0)             # 1-d: nodecay
    assert s["3.bias"] == (0.7, 0.0)             # ln_w with type bias claims the LayerNorm bias
    assert s["3.weight"] == (0.1, 0.0)           # ndim_is1 only
    assert s["4.bias"] == (0.3, 0.0)
    assert s["4.weight"] == (0.1, 1e-4)
    assert s["5.weight"] == (0.1, 0.0)           # BatchNorm1d is not bn_w in UP, but 1-d
    assert s["0.weight"] == (0.1, 1e-4) and s["2.weight"] == (0.1, 1e-4)


def test_pconfig_nodecay_inside_an_entry_is_ignored_as_in_up():
    model = net()
    pconfig = {"linear_b": {"type": "bias", "kwargs": {"weight_decay": 0.0}, "nodecay": ["2.weight"]}}
    s = settings(build(model, pconfig=pconfig), model)
    assert s["2.weight"] == (0.1, 1e-4) and s["4.bias"] == (0.1, 0.0)


def test_pconfig_nodecay_by_name_and_frozen_left_out():
    model = net()
    model[0].weight.requires_grad_(False)
    s = settings(build(model, pconfig={"nodecay": ["2."], "bn_b": {"type": "bias", "kwargs": {"lr": 0.5}}}), model)
    assert "0.weight" not in s
    assert s["2.weight"] == (0.1, 0.0) and s["1.bias"] == (0.5, 1e-4) and s["1.weight"] == (0.1, 1e-4)


def test_yolov5_groups():
    model = net()
    opt = build(model, register_type="yolov5")
    names = {id(p): n for n, p in model.named_parameters()}
    groups = [[names[id(p)] for p in g["params"]] for g in opt.param_groups]
    assert groups == [["1.weight"], ["0.weight", "2.weight", "3.weight", "4.weight", "5.weight"],
                      ["0.bias", "1.bias", "3.bias", "4.bias", "5.bias"], []]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 1e-4, 0.0, 1e-4]


def test_yolov5_except_groups_decay_the_except_modules_biases():
    """UP's yolov5_except: YOLOv5's groups, but module 4 (the Linear) keeps its bias with its
    weight, under weight decay; three groups (UP's), nothing else."""
    model = net()
    opt = build_optimizer(model, {"type": "SGD", "register_type": "yolov5_except",
                                  "kwargs": {"lr": 0.1, "weight_decay": 1e-4, "except_keys": ["4"]}})
    names = {id(p): n for n, p in model.named_parameters()}
    groups = [[names[id(p)] for p in g["params"]] for g in opt.param_groups]
    assert groups == [["1.weight"], ["0.weight", "2.weight", "3.weight", "4.weight", "4.bias", "5.weight"],
                      ["0.bias", "1.bias", "3.bias", "5.bias"]]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 1e-4, 0.0]
    assert "except_keys" not in opt.defaults


@pytest.mark.parametrize("extra, match", [
    ({"register_type": "yolov6"}, r"register_type: unknown 'yolov6'"),
    ({"register_type": "yolov5_except", "kwargs": {"lr": 0.1, "weight_decay": 1e-4, "except_keys": ["9"]}},
     r"kwargs\.except_keys: the model has no module '9'"),
    ({"register_type": "yolov5_except", "kwargs": {"lr": 0.1, "weight_decay": 1e-4, "except_keys": "4"}},
     r"kwargs\.except_keys: expected a list of module names"),
    ({"register_type": "yolov5", "pconfig": {"nodecay": ["x"]}}, "makes its own groups"),
    ({"pconfig": {"bn_w": {"type": "gamma", "kwargs": {}}}}, r"pconfig\.bn_w\.type: expected weight or bias"),
    ({"pconfig": {"conv_b": {"type": "bias", "kwargs": {}}}}, "UP's pconfig has no 'conv' kind"),
    ({"pconfig": {"layer_decay": {"type": "vit_base", "value": 0.65}}}, "needs a ViT backbone"),
])
def test_errors(extra, match):
    with pytest.raises(ConfigError, match=match):
        build(net(), **extra)


def reference_lamb(ws, grads_per_step, lr, betas, eps, wd, max_norm):
    """LAMB written out for a list of 1-d float64 tensors, as in the NVLAMB formulation."""
    ws = [w.clone().double() for w in ws]
    m = [torch.zeros_like(w) for w in ws]
    v = [torch.zeros_like(w) for w in ws]
    for step, grads in enumerate(grads_per_step, start=1):
        total = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
        div = total / max_norm if total > max_norm else 1.0
        for i, g in enumerate(grads):
            g = g.double() / div
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            mh, vh = m[i] / (1 - betas[0] ** step), v[i] / (1 - betas[1] ** step)
            u = mh / (vh.sqrt() + eps) + wd * ws[i]
            r = 1.0
            if wd != 0:
                wn, un = float(ws[i].norm()), float(u.norm())
                r = wn / un if wn > 0 and un > 0 else 1.0
            ws[i] = ws[i] - lr * r * u
    return ws


@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_lamb_matches_its_update_rule(wd):
    torch.manual_seed(1)
    params = [nn.Parameter(torch.randn(5, dtype=torch.float64)), nn.Parameter(torch.randn(3, dtype=torch.float64))]
    start = [p.detach().clone() for p in params]
    steps = [[torch.randn(5, dtype=torch.float64) * 3, torch.randn(3, dtype=torch.float64) * 3] for _ in range(3)]
    opt = LAMB(params, lr=0.01, betas=(0.9, 0.99), eps=1e-6, weight_decay=wd, max_grad_norm=1.0)
    for grads in steps:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        assert all(torch.equal(p.grad, g) for p, g in zip(params, grads))  # gradients untouched
    want = reference_lamb(start, steps, 0.01, (0.9, 0.99), 1e-6, wd, 1.0)
    for p, w in zip(params, want):
        torch.testing.assert_close(p.detach(), w, rtol=1e-10, atol=1e-12)


def test_lamb_by_name_and_resume():
    model = net()
    opt = build_optimizer(model, {"type": "LAMB", "kwargs": {"lr": 0.01, "weight_decay": 0.02}})
    assert isinstance(opt, LAMB)
    sum((p * p).sum() for p in model.parameters()).backward()
    opt.step()
    again = build_optimizer(net(), {"type": "LAMB", "kwargs": {"lr": 0.01, "weight_decay": 0.02}})
    again.load_state_dict(opt.state_dict())
    assert again.state_dict()["state"][0]["step"] == 1
