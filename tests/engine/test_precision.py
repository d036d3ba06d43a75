"""The precision decision: what the config asks, what the hardware runs natively, what runs.

The hardware check is stubbed both ways (native / not native) so every branch runs on any
machine; the bf16 probe also runs for real once. In-process `up train` runs check the one line
in train.log and the comment in config.yaml, UP's ``runtime.fp16: true`` included.
"""
import logging
import math
import warnings

import pytest
import torch
from torch import nn

from conftest import write_cfg
from optim_helpers import digits_cfg
from up_trainer.engine import precision
from up_trainer.engine.optim import Optimization
from up_trainer.engine.schedule import Schedule
from up_trainer.engine.precision import decide_precision, probe_cpu_slowdown
from up_trainer.errors import ConfigError

CPU = torch.device("cpu")
FP16_UP = {"fp16": True}
BF16 = {"amp": {"enable": True, "dtype": "bfloat16"}}


@pytest.fixture
def cpu_is(monkeypatch):
    """cpu_is(native) makes the CPU report (or not) native arithmetic for every dtype."""
    def stub(native):
        evidence = "the CPU has avx512_bf16" if native else "the x86_64 CPU has no avx512_fp16 or amx_fp16"
        monkeypatch.setattr(precision, "cpu_native", lambda dtype: (native, evidence))
    return stub


def no_probe(dtype):
    raise AssertionError("the probe runs only for bf16 on a CPU without it")


def test_fp16_on_cpu_without_native_support_falls_back_to_fp32(cpu_is):
    cpu_is(False)
    plan = decide_precision(FP16_UP, CPU, probe=no_probe)
    assert plan.asked is torch.float16 and plan.runs is None and not plan.scaler and plan.fell_back
    line = plan.describe()
    assert line.startswith("precision: asked float16 (runtime.fp16), runs float32: not native: ")
    assert "runtime.amp.force: true keeps float16" in line


def test_bf16_on_cpu_without_native_support_reports_the_probe_and_falls_back(cpu_is):
    cpu_is(False)
    plan = decide_precision(BF16, CPU, probe=lambda dtype: 7.46)
    assert plan.runs is None and plan.probe_ratio == 7.46
    assert "measured 7.5x the float32 step time in a 3-step probe; float32 instead" in plan.describe()


def test_forced_dtype_runs_even_when_not_native(cpu_is):
    cpu_is(False)
    plan = decide_precision({"fp16": True, "amp": {"force": True}}, CPU, probe=no_probe)
    assert plan.runs is torch.float16 and plan.scaler and plan.forced and not plan.fell_back
    assert "kept because runtime.amp.force is true" in plan.describe()
    plan = decide_precision({"amp": {"enable": True, "dtype": "bf16", "force": True}}, CPU, probe=no_probe)
    assert plan.runs is torch.bfloat16 and not plan.scaler


def test_native_dtype_runs_as_asked(cpu_is):
    cpu_is(True)
    plan = decide_precision(BF16, CPU, probe=no_probe)
    assert plan.runs is torch.bfloat16 and plan.native and not plan.fell_back
    assert plan.describe() == ("precision: asked bfloat16 (runtime.amp), runs bfloat16 autocast: "
                               "native: the CPU has avx512_bf16")
    assert decide_precision(FP16_UP, CPU).scaler


def test_no_amp_asked_is_fp32_and_checks_nothing(monkeypatch):
    monkeypatch.setattr(precision, "cpu_native", lambda dtype: pytest.fail("no check without AMP"))
    plan = decide_precision({"amp": {"enable": False, "dtype": "bfloat16"}}, CPU)
    assert plan.runs is None and not plan.fell_back
    assert plan.describe() == "precision: float32 (no mixed precision asked)"


def test_cuda_bf16_without_support_runs_fp16_with_a_scaler(monkeypatch):
    def cuda_native(dtype, device):
        if dtype is torch.bfloat16:
            return False, "Tesla V100 (compute capability 7.0) has no bfloat16 (8.0 and up)"
        return True, "Tesla V100 (compute capability 7.0) has float16 (5.3 and up)"
    monkeypatch.setattr(precision, "cuda_native", cuda_native)
    plan = decide_precision(BF16, torch.device("cuda", 0), probe=no_probe)
    assert plan.runs is torch.float16 and plan.scaler
    assert "float16 instead (runtime.amp.force: true keeps bfloat16)" in plan.describe()
    forced = decide_precision({"amp": {"enable": True, "dtype": "bfloat16", "force": True}}, torch.device("cuda", 0))
    assert forced.runs is torch.bfloat16


def test_the_real_probe_is_quick_and_measures_something():
    import time

    t0 = time.perf_counter()
    ratio = probe_cpu_slowdown(torch.bfloat16)
    assert time.perf_counter() - t0 < 5.0  # 'a fraction of a second' idle; generous for a loaded runner
    assert math.isfinite(ratio) and ratio > 0


def test_amp_keys_are_validated():
    with pytest.raises(ConfigError, match=r"runtime\.amp\.forced: unknown key.*force"):
        decide_precision({"amp": {"enable": True, "forced": True}}, CPU)
    with pytest.raises(ConfigError, match=r"runtime\.amp\.force: expected true or false"):
        decide_precision({"amp": {"enable": True, "force": "yes"}}, CPU)
    with pytest.raises(ConfigError, match=r"runtime\.amp: expected a mapping"):
        decide_precision({"amp": "bf16"}, CPU)


def _run(tmp_path, run_up, runtime, name="run"):
    cfg = digits_cfg(net="test_mlp", train_subset=64, test_subset=32, batch_size=32, max_epoch=1,
                     runtime={"seed": 5, **runtime})
    path = write_cfg(tmp_path / f"{name}.yaml", cfg)
    res = run_up(["train", "--config", path, "--work-dir", tmp_path / name])
    assert res.exit_code == 0, (res.stdout[-2000:], res.exception)
    log = (tmp_path / name / "train.log").read_text()
    lines = [ln for ln in log.splitlines() if " precision: " in ln]
    comments = [ln for ln in (tmp_path / name / "config.yaml").read_text().splitlines() if "precision:" in ln]
    assert len(lines) == 1 and len(comments) == 1, (lines, comments)
    return lines[0], comments[0]


def test_up_fp16_true_on_a_cpu_without_fp16_trains_in_fp32_and_says_so(tmp_path, run_up, cpu_is):
    cpu_is(False)
    line, comment = _run(tmp_path, run_up, FP16_UP)
    assert " W precision: asked float16 (runtime.fp16), runs float32: not native" in line
    assert comment == "# " + line.split(" W ", 1)[1]
    # the config.yaml still loads, and still asks for what the user asked (the next start re-decides)
    import yaml
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["runtime"]["fp16"] is True


def test_forced_and_native_runs_are_recorded_too(tmp_path, run_up, cpu_is):
    cpu_is(False)
    line, _ = _run(tmp_path, run_up, {"fp16": True, "amp": {"force": True}}, "forced")
    assert " I precision: asked float16 (runtime.fp16), runs float16 autocast with a dynamic GradScaler" in line
    cpu_is(True)
    line, comment = _run(tmp_path, run_up, BF16, "native")
    assert comment == "# precision: asked bfloat16 (runtime.amp), runs bfloat16 autocast: native: the CPU has avx512_bf16"


def test_a_step_the_scaler_skips_warns_nothing():
    """The scaler skips the first update (its default scale overflows fp16 on this loss); the LR
    schedule still advances, without torch's 'lr_scheduler.step() before optimizer.step()'."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    tcfg = {"optimizer": {"type": "SGD", "kwargs": {"lr": 0.1}}, "accumulate": 1, "max_epoch": 2,
            "lr_scheduler": {"type": "MultiStepLR", "kwargs": {"milestones": [1]}}}
    optim = Optimization(model, tcfg, {"fp16": True, "amp": {"force": True}}, CPU, Schedule(tcfg, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with optim.autocast():
            loss = model(torch.full((2, 4), 100.0)).sum()
        optim.backward(loss)
        optim.step()
    assert optim.scaler.get_scale() < 65536.0  # the step really was skipped
    assert optim.lr_scheduler.last_iter == 1
    assert [str(w.message) for w in caught] == []


def test_non_finite_scalars_reach_the_event_file_without_a_console_line(tmp_path, caplog):
    from test_logger import read_events
    from up_trainer.writers.tensorboard import TensorboardWriter

    w = TensorboardWriter(str(tmp_path / "tb"))
    with caplog.at_level(logging.WARNING):
        w.add_scalar("train/grad_norm", float("inf"), 1)
        w.add_scalar("train/grad_norm", 2.0, 2)
        w.close()
    assert not [r for r in caplog.records if "NaN or Inf" in r.getMessage()]
    values = read_events(str(tmp_path / "tb"))["train/grad_norm"]
    assert values[0][0] == 1 and math.isinf(values[0][1]) and values[1] == (2, 2.0)



def test_dry_run_shows_the_decision(tmp_path, run_up, cpu_is):
    cpu_is(False)
    cfg = digits_cfg(net="test_mlp", train_subset=64, test_subset=32, batch_size=32, max_epoch=1,
                     runtime={"seed": 5, "fp16": True})
    res = run_up(["train", "--config", write_cfg(tmp_path / "c.yaml", cfg), "--work-dir", tmp_path / "dry", "--dry-run"])
    assert res.exit_code == 0, (res.stdout[-2000:], res.exception)
    assert "precision: asked float16 (runtime.fp16), runs float32: not native" in res.stdout
    assert not (tmp_path / "dry" / "config.yaml").exists()  # a dry run writes nothing but the log
