"""The optimizer types of UP's other files' trainer sections: ``LARS`` (configs/ssl simclr /
simsiam / mae) against a hand computation, and ``FusedFP16AdamW`` (configs/multitask) as
torch's AdamW, fused only where every parameter is on CUDA, said in one log line."""
import logging

import pytest
import torch

from up_trainer.engine.lars import LARS
from up_trainer.engine.optim import build_optimizer
from up_trainer.errors import ConfigError


def lars_by_hand(w, grads, lr, momentum, wd, eta, nesterov=False, dampening=0.0):
    """UP's LARS step written out on a python list (one parameter)."""
    buf = None
    for g in grads:
        w_norm = sum(x * x for x in w) ** 0.5
        g_norm = sum(x * x for x in g) ** 0.5 + wd * w_norm
        local = eta * w_norm / g_norm
        d = [gi + wd * wi for gi, wi in zip(g, w)]
        if momentum:
            buf = list(d) if buf is None else [momentum * b + (1 - dampening) * di for b, di in zip(buf, d)]
            d = [di + momentum * b for di, b in zip(d, buf)] if nesterov else buf
        w = [wi - lr * local * di for wi, di in zip(w, d)]
    return w


@pytest.mark.parametrize("nesterov", [False, True])
def test_lars_matches_the_hand_computation(nesterov):
    grads = [[0.6, 0.8], [-0.2, 0.5], [0.3, -0.1]]
    w = torch.nn.Parameter(torch.tensor([3.0, 4.0], dtype=torch.float64))
    opt = LARS([w], lr=4.8, momentum=0.9, weight_decay=1e-4, eta=0.001, nesterov=nesterov)  # simclr_v1's values
    for g in grads:
        w.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    expected = lars_by_hand([3.0, 4.0], grads, 4.8, 0.9, 1e-4, 0.001, nesterov)
    assert w.detach().tolist() == pytest.approx(expected, rel=1e-12)
    assert w.grad.tolist() == grads[-1]  # the gradient itself is left alone


def test_lars_leaves_zero_weights_and_zero_gradients_alone():
    bias = torch.nn.Parameter(torch.zeros(3))
    still = torch.nn.Parameter(torch.ones(2))
    opt = LARS([bias, still], lr=1.0, momentum=0.9)
    bias.grad, still.grad = torch.ones(3), torch.zeros(2)
    opt.step()
    assert bias.tolist() == [0.0] * 3  # ||w|| = 0: local lr 0, as in UP
    assert still.tolist() == [1.0, 1.0]  # ||g|| = 0: no step (UP would write NaN)


def test_lars_from_up_trainer_section_and_its_checks():
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(model, {"type": "LARS", "kwargs": {"lr": 4.8, "momentum": 0.9, "weight_decay": 0.0001}})
    assert isinstance(opt, LARS) and opt.defaults["eta"] == 0.001
    with pytest.raises(ConfigError, match=r"trainer\.optimizer\.kwargs: nesterov needs a momentum > 0"):
        build_optimizer(model, {"type": "LARS", "kwargs": {"lr": 0.1, "nesterov": True}})
    with pytest.raises(ConfigError, match=r"trainer\.optimizer\.kwargs\.betas: unknown argument"):
        build_optimizer(model, {"type": "LARS", "kwargs": {"lr": 0.1, "betas": [0.9, 0.99]}})


def test_fused_fp16_adamw_is_torch_adamw_with_one_log_line(caplog):
    model = torch.nn.Linear(3, 2)
    section = {"type": "FusedFP16AdamW", "kwargs": {"lr": 6.25e-06, "betas": [0.9, 0.999], "weight_decay": 0.05}}
    with caplog.at_level(logging.INFO, logger="up"):
        opt = build_optimizer(model, section)  # configs/multitask/r50-retina-atss-qfl.yaml's section
    assert type(opt) is torch.optim.AdamW and not opt.defaults["fused"]
    assert opt.defaults["weight_decay"] == 0.05 and opt.defaults["betas"] == (0.9, 0.999)
    lines = [r.getMessage() for r in caplog.records if "FusedFP16AdamW" in r.getMessage()]
    assert lines == ["optimizer FusedFP16AdamW: torch.optim.AdamW (not fused: parameters on cpu)"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_fp16_adamw_is_fused_on_cuda_and_steps_as_plain_adamw():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).cuda()
    plain = torch.nn.Linear(3, 2).cuda()
    plain.load_state_dict(model.state_dict())
    opt = build_optimizer(model, {"type": "FusedFP16AdamW", "kwargs": {"lr": 0.01, "weight_decay": 0.05}})
    ref = torch.optim.AdamW(plain.parameters(), lr=0.01, weight_decay=0.05)
    assert opt.defaults["fused"] is True
    x = torch.randn(4, 3, device="cuda")
    for net, o in ((model, opt), (plain, ref)):
        for _ in range(3):
            o.zero_grad()
            net(x).square().sum().backward()
            o.step()
    assert torch.allclose(model.weight, plain.weight, atol=1e-6)
