"""Gradient accumulation equals a bigger batch; bf16 autocast on CPU trains as well as fp32;
fp16 scaler state is checkpointed; resume is bitwise with EMA + accumulation + grad_clipper."""
import pytest
import torch
from torch import nn

from conftest import write_cfg
from optim_helpers import digits_cfg, train_in_process
from up_trainer.engine.optim import Optimization, amp_dtype
from up_trainer.engine.schedule import Schedule
from up_trainer.errors import ConfigError


def test_accumulate_4_x_batch_8_equals_batch_32(tmp_path):
    # 72 samples: updates of 32, 32 and a short last one of 8 (one micro-batch, scaled by 1)
    common = dict(net="test_mlp", train_subset=72, test_subset=32, max_epoch=2)
    sched = {"type": "MultiStepLR", "kwargs": {"milestones": [1]}, "warmup_iter": 2}
    opt = {"type": "SGD", "kwargs": {"lr": 0.2, "momentum": 0.9, "weight_decay": 1e-3}}
    big = train_in_process(digits_cfg(batch_size=32, trainer={"max_epoch": 2, "optimizer": opt,
                                                               "lr_scheduler": sched}, **common), tmp_path / "big")
    small = train_in_process(digits_cfg(batch_size=8, trainer={"max_epoch": 2, "optimizer": opt, "accumulate": 4,
                                                                "lr_scheduler": sched}, **common), tmp_path / "small")
    assert big.state.iter == 6 and small.state.iter == 18
    assert big.optim.lr_scheduler.last_iter == small.optim.lr_scheduler.last_iter == 6  # updates, not batches
    a, b = big.module.state_dict(), small.module.state_dict()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=0, atol=1e-6), (k, float((a[k] - b[k]).abs().max()))


def test_bf16_on_cpu_trains_within_one_point_of_fp32(tmp_path):
    results = {}
    # forced: this test is about bf16 arithmetic, whether or not this CPU has it natively
    for name, amp in (("fp32", {}), ("bf16", {"enable": True, "dtype": "bfloat16", "force": True})):
        cfg = digits_cfg(net="test_mlp", train_subset=None, test_subset=None, batch_size=32, max_epoch=3,
                         runtime={"seed": 5, "amp": amp},
                         trainer={"max_epoch": 3, "test_freq": 3,
                                  "optimizer": {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9}}})
        cfg["net"]["kwargs"] = {"hidden": 64}
        trainer = train_in_process(cfg, tmp_path / name)
        results[name] = trainer.state.metrics["top1"]
        if amp:
            assert trainer.optim.amp_dtype is torch.bfloat16 and trainer.optim.scaler is None
            with trainer.optim.autocast():  # the run really computed in bf16
                assert trainer.module({"image": torch.zeros(2, 1, 8, 8)})["logits"].dtype is torch.bfloat16
    assert results["fp32"] > 90.0, results  # it really learned
    assert abs(results["bf16"] - results["fp32"]) <= 1.0, results


def test_amp_config_forms():
    assert amp_dtype({"fp16": True}) is torch.float16
    assert amp_dtype({"amp": {"enable": True, "dtype": "bfloat16"}}) is torch.bfloat16
    assert amp_dtype({"amp": {"enable": False, "dtype": "bfloat16"}}) is None
    with pytest.raises(ConfigError, match=r"runtime\.amp\.dtype"):
        amp_dtype({"amp": {"enable": True, "dtype": "half8"}})
    with pytest.raises(ConfigError, match=r"runtime\.amp\.enabled: unknown key"):
        amp_dtype({"amp": {"enabled": True}})


def test_fp16_scaler_state_is_checkpointed():
    def make():
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        tcfg = {"optimizer": {"type": "SGD", "kwargs": {"lr": 0.1}}, "accumulate": 1, "max_epoch": 1}
        return model, Optimization(model, tcfg, {"fp16": True, "amp": {"force": True}}, torch.device("cpu"), Schedule(tcfg, 4))

    model, optim = make()
    for _ in range(2):  # the default scale overflows fp16 here: the scaler backs off
        with optim.autocast():
            loss = model(torch.full((2, 4), 100.0)).sum()
        optim.backward(loss)
        optim.step()
    state = optim.state_dict()
    assert state["scaler"]["scale"] < 65536.0
    _, fresh = make()
    fresh.load_state_dict(state)
    assert fresh.scaler.get_scale() == optim.scaler.get_scale()


def test_resume_is_bitwise_with_ema_accumulation_and_moving_average_clip(tmp_path, run_up):
    cfg = digits_cfg(net="test_cnn", train_subset=80, test_subset=32, batch_size=8, max_epoch=4,
                     trainer={"max_epoch": 4, "accumulate": 3,
                              "optimizer": {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9,
                                                                      "weight_decay": 1e-4}},
                              "lr_scheduler": {"type": "cosine", "kwargs": {"T_max": 4}, "warmup_epochs": 1, "warmup_type": "exp",
                                               "warmup_ratio": 0.01}},
                     hooks=[{"type": "grad_clipper", "kwargs": {"mode": "moving_average", "momentum": 0.8,
                                                                "tolerance": 1.1}}],
                     ema={"enable": True, "ema_type": "linear", "kwargs": {"decay": 0.9, "warmup": 3}})
    path = write_cfg(tmp_path / "cfg.yaml", cfg)
    straight, split = tmp_path / "straight", tmp_path / "split"
    res = run_up(["train", "--config", path, "--work-dir", straight])
    assert res.exit_code == 0, (res.stdout[-2000:], res.exception)
    res = run_up(["train", "--config", path, "--work-dir", split, "--opts", "trainer.max_epoch=2"])
    assert res.exit_code == 0, (res.stdout[-2000:], res.exception)
    res = run_up(["train", "--config", path, "--work-dir", split, "--resume", split / "checkpoints" / "ckpt_e2.pth"])
    assert res.exit_code == 0, (res.stdout[-2000:], res.exception)

    a = torch.load(straight / "checkpoints" / "ckpt_e4.pth", weights_only=True)
    b = torch.load(split / "checkpoints" / "ckpt_e4.pth", weights_only=True)
    assert a["iter"] == b["iter"] == 40
    assert a["ema"]["updates"] == b["ema"]["updates"] == 16  # 10 batches / 3 -> 4 updates per epoch
    assert a["lr_scheduler"]["last_iter"] == b["lr_scheduler"]["last_iter"] == 16
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
        assert torch.equal(a["ema"]["model"][k], b["ema"]["model"][k]), k
    assert any(not torch.equal(a["model"][k], a["ema"]["model"][k]) for k in a["model"])
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and sa
    for i in sa:
        assert torch.equal(sa[i]["momentum_buffer"], sb[i]["momentum_buffer"]), i
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    assert a["hooks"]["grad_clipper"] == b["hooks"]["grad_clipper"]
    assert a["hooks"]["grad_clipper"]["count"] == 16
