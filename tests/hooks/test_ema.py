"""EMA: UP's linear/exp decay formulas, update only on optimizer updates, bitwise swap for
evaluation, UP's ema section -> hook, EMA weights in checkpoints and used by `up eval`."""
import math

import pytest
import torch
from torch import nn

from optim_helpers import digits_cfg, fake_trainer, resolved, train_in_process
from up_trainer.engine.ema import ModelEMA
from up_trainer.errors import ConfigError
from up_trainer.hooks.ema import EMAHook
from up_trainer.registry import HOOKS


def one_param():
    m = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        m.weight.fill_(0.0)
    return m


@pytest.mark.parametrize("ema_type, warmup", [("linear", 1), ("linear", 4), ("exp", 3)])
def test_decay_formula(ema_type, warmup):
    m = one_param()
    ema = ModelEMA(m, decay=0.9, ema_type=ema_type, warmup=warmup)
    avg = 0.0
    for t in range(6):
        with torch.no_grad():
            m.weight.fill_(float(t + 1))
        ema.update(m)
        d = min(0.9, (1 + t) / (warmup + t)) if ema_type == "linear" else 0.9 * (1 - math.exp(-t / warmup))
        avg = d * avg + (1 - d) * (t + 1)
        assert float(ema.model["weight"]) == pytest.approx(avg, rel=1e-6)
    assert ema.updates == 6


def test_inner_T_and_integer_buffers():
    m = nn.Sequential(nn.Linear(1, 1), nn.BatchNorm1d(1))
    ema = ModelEMA(m, decay=0.5, inner_T=2)
    assert ema.decay == 0.25
    before = ema.model["0.weight"].clone()
    m(torch.randn(4, 1))  # BatchNorm counts a batch
    with torch.no_grad():
        m[0].weight.add_(1.0)
    ema.update(m)  # t=0 averages
    assert not torch.equal(before, ema.model["0.weight"])
    assert int(ema.model["1.num_batches_tracked"]) == 1  # counters are copied, not averaged
    mid = ema.model["0.weight"].clone()
    ema.update(m)  # t=1 skipped
    assert torch.equal(mid, ema.model["0.weight"])


def test_hook_updates_only_on_optimizer_updates_and_swaps_bitwise():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    trainer = fake_trainer(model, None, 4)
    hook = EMAHook(decay=0.5)
    hook.before_train(trainer)
    assert trainer.ema is hook.ema and set(trainer.ema.state_dict()["model"]) == set(model.state_dict())
    with torch.no_grad():
        model.weight.add_(1.0)
    trainer.did_update = False
    hook.after_update(trainer, 1)
    assert hook.ema.updates == 0
    trainer.did_update = True
    hook.after_update(trainer, 2)
    assert hook.ema.updates == 1
    raw = {k: v.clone() for k, v in model.state_dict().items()}
    weight_param = model.weight
    hook.before_eval(trainer)
    assert torch.equal(model.weight, hook.ema.model["weight"]) and not torch.equal(model.weight, raw["weight"])
    hook.after_eval(trainer, {})
    assert model.weight is weight_param  # in-place: optimizer references stay valid
    for k, v in model.state_dict().items():
        assert torch.equal(v, raw[k])


def test_up_ema_section_becomes_the_hook():
    cfg = resolved(digits_cfg(ema={"enable": True, "ema_type": "exp", "kwargs": {"decay": 0.9998, "warmup": 100}}))
    assert "ema" not in cfg
    entries = [h for h in cfg["hooks"] if h["type"] == "ema"]
    assert entries == [{"type": "ema", "kwargs": {"decay": 0.9998, "warmup": 100, "ema_type": "exp"}}]
    hook = HOOKS.build(entries[0], "hooks[3]")
    assert hook.kwargs["ema_type"] == "exp"
    off = resolved(digits_cfg(ema={"enable": False, "kwargs": {"decay": 0.9}}))
    assert not [h for h in off["hooks"] if h["type"] == "ema"]
    assert [h for h in resolved(digits_cfg(ema={"enable": False}), ["ema.enable=true"])["hooks"] if h["type"] == "ema"]
    with pytest.raises(ConfigError, match="configured twice"):
        resolved(digits_cfg(ema={"enable": True}, hooks=[{"type": "ema"}]))
    with pytest.raises(ConfigError, match=r"ema\.decay: unknown key"):
        resolved(digits_cfg(ema={"decay": 0.9}))
    with pytest.raises(ConfigError, match=r"hooks\[0\]\.kwargs\.ema_type: unknown 'ewma'"):
        HOOKS.build({"type": "ema", "kwargs": {"ema_type": "ewma"}}, "hooks[0]")
    with pytest.raises(ConfigError, match=r"kwargs\.decay: must be in \[0, 1\)"):
        HOOKS.build({"type": "ema", "kwargs": {"decay": 1.0}}, "hooks[0]")


def test_training_saves_ema_evaluates_with_it_and_up_eval_uses_it(tmp_path, caplog):
    import logging

    from up_trainer.engine.checkpoint import load_checkpoint
    from up_trainer.run import run_eval

    cfg = digits_cfg(train_subset=64, batch_size=16, max_epoch=2, ema={"kwargs": {"decay": 0.8}})
    trainer = train_in_process(cfg, tmp_path)
    ckpt = load_checkpoint(str(tmp_path / "checkpoints" / "ckpt_e2.pth"))
    assert ckpt["ema"]["updates"] == 8
    raw, avg = ckpt["model"], ckpt["ema"]["model"]
    assert set(raw) == set(avg) and any(not torch.equal(raw[k], avg[k]) for k in raw)
    for k, v in trainer.module.state_dict().items():  # evaluation swapped the raw weights back
        assert torch.equal(v, raw[k])
    # the trainer's last evaluation used the EMA weights: `up eval` (EMA by default) agrees
    rcfg = resolved(cfg)
    with caplog.at_level(logging.INFO, logger="up"):
        ema_metrics = run_eval(rcfg, str(tmp_path / "checkpoints" / "ckpt_e2.pth"), work_dir=str(tmp_path / "e"))
    assert ema_metrics["top1"] == trainer.state.metrics["top1"]
    raw_trainer_metrics = run_eval(rcfg, str(tmp_path / "checkpoints" / "ckpt_e2.pth"),
                                   work_dir=str(tmp_path / "r"), use_ema=False)
    assert set(raw_trainer_metrics) == set(ema_metrics)
