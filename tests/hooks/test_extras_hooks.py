"""early_stopping, nan_guard, empty_cache, sync_buffers, safetensors_export."""
import math
import os
import socket
import sys
from types import SimpleNamespace

import pytest
import torch

from conftest import tiny_cfg, write_cfg
from up_trainer.engine.checkpoint_policy import CheckpointPolicy
from up_trainer.hooks.base import Hook
from up_trainer.registry import HOOKS

import ctrl_plugin  # noqa: F401  (registers test_fault)


def small(max_epoch=2, hooks=(), **extra):
    cfg = tiny_cfg(trainer={"max_epoch": max_epoch})
    cfg["runtime"]["num_threads"] = 1
    cfg["dataset"]["train"]["kwargs"]["subset"] = 48  # 3 iterations per epoch
    cfg["hooks"] = list(hooks)
    cfg["default_hooks"] = {"logger": {"type": "train_val_logger", "kwargs": {"summary_writer": "none", "plot": False}}}
    for k, v in extra.items():
        cfg[k] = {**cfg.get(k, {}), **v}
    return cfg


def train(run_up, tmp_path, name, cfg, code=0, work=None):
    res = run_up(["train", "--config", write_cfg(tmp_path / f"{name}.yaml", cfg), "--work-dir", work or tmp_path / name])
    assert res.exit_code == code, (res.stdout[-3000:], res.stderr, res.exception)
    return res


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


# -- early_stopping ----------------------------------------------------------------------------
def test_early_stopping_stops_after_the_epoch_checkpoint_and_stays_stopped(tmp_path, run_up):
    # min_delta far above any top1 change: the 2nd evaluation cannot improve, patience 1 stops there.
    hooks = [{"type": "early_stopping", "kwargs": {"patience": 1, "min_delta": 1000.0}}]
    cfg = small(max_epoch=5, hooks=hooks, trainer={"save_freq": 10})
    res = train(run_up, tmp_path, "es", cfg)
    ckpts = tmp_path / "es" / "checkpoints"
    assert "early stopping at epoch 2" in res.stdout
    assert not (ckpts / "ckpt_e3.pth").exists() and not (ckpts / "ckpt_e1.pth").exists()
    last = load(ckpts / "ckpt_e2.pth")  # written although save_freq 10 would skip it
    assert os.path.samefile(ckpts / "ckpt_latest.pth", ckpts / "ckpt_e2.pth")
    assert last["hooks"]["early_stopping"]["wait"] == 1
    # A requeued job auto-resumes: it must stop again at once, not train on.
    cfg["saver"] = {"save_dir": "checkpoints", "auto_resume": True}
    res = train(run_up, tmp_path, "es2", cfg, work=tmp_path / "es")
    assert "had already stopped" in res.stdout and not (ckpts / "ckpt_e3.pth").exists()
    # More patience lets it go on from there.
    cfg["hooks"][0]["kwargs"]["patience"] = 2
    cfg["trainer"]["max_epoch"] = 3
    train(run_up, tmp_path, "es3", cfg, work=tmp_path / "es")
    assert load(ckpts / "ckpt_e3.pth")["hooks"]["early_stopping"]["wait"] == 2


def test_early_stopping_counts_evaluations_and_min_delta():
    from up_trainer.hooks.early_stopping import EarlyStopping

    ev = SimpleNamespace(primary_metric="loss", metric_keys=lambda: ["loss"])
    tr = SimpleNamespace(evaluator=ev, state=SimpleNamespace(epoch=1), checkpoints=CheckpointPolicy({}), stop_training=False)
    hook = EarlyStopping(mode="min", patience=2, min_delta=0.1)
    hook.name = "early_stopping"
    hook.before_train(tr)
    for epoch, value in enumerate([1.0, 0.95, float("nan"), 0.5, 0.45], start=1):
        tr.state.epoch = epoch
        hook.after_eval(tr, {"loss": value})
        assert tr.stop_training is (epoch == 3), epoch  # 0.95 is within min_delta, NaN never improves
        tr.stop_training = False
    assert (hook.best, hook.best_epoch, hook.wait) == (0.5, 4, 1)


# -- nan_guard ---------------------------------------------------------------------------------
weights_log = []


@HOOKS.register("test_weights_probe")
class WeightsProbe(Hook):
    """Test only: a copy of the first conv's weights after every iteration."""

    priority = "LOWEST"

    def after_update(self, trainer, iteration):
        weights_log.append((iteration, trainer.module.state_dict()["backbone.conv1.weight"].clone()))


def test_nan_guard_skip_drops_exactly_that_update(tmp_path, run_up):
    weights_log.clear()
    hooks = [{"type": "nan_guard"}, {"type": "test_fault", "kwargs": {"nan_at": [2, 5], "always": True}},
             {"type": "test_weights_probe"}]
    res = train(run_up, tmp_path, "skip", small(hooks=hooks))
    w = dict(weights_log)
    assert torch.equal(w[2], w[1]) and torch.equal(w[5], w[4])  # skipped: no change at all
    assert not torch.equal(w[3], w[2]) and not torch.equal(w[6], w[5])  # others train
    final = load(tmp_path / "skip" / "checkpoints" / "ckpt_e2.pth")
    assert all(torch.isfinite(t).all() for t in final["model"].values() if t.is_floating_point())
    assert final["hooks"]["nan_guard"]["skipped"] == 2
    assert "non-finite loss=nan at epoch 1 iteration 2: update skipped" in res.stdout


def test_nan_guard_abort_names_the_iteration(tmp_path, run_up):
    hooks = [{"type": "nan_guard", "kwargs": {"policy": "abort"}}, {"type": "test_fault", "kwargs": {"nan_at": [4]}}]
    res = train(run_up, tmp_path, "abort", small(hooks=hooks), code=1)
    assert "non-finite loss=nan at epoch 2 iteration 4" in str(res.exception)
    assert type(res.exception).__name__ == "NonFiniteLossError"


def test_nan_guard_rollback_replays_to_the_clean_result(tmp_path, run_up):
    """NaN once at iteration 5 (epoch 2): roll back to ckpt_e1.pth, replay, and end bitwise
    where a run without the NaN ends, since the checkpoint restores position and RNG."""
    clean = train(run_up, tmp_path, "clean", small())
    hooks = [{"type": "nan_guard", "kwargs": {"policy": "rollback"}}, {"type": "test_fault", "kwargs": {"nan_at": [5]}}]
    res = train(run_up, tmp_path, "rb", small(hooks=hooks))
    assert "rolling back to" in res.stdout and "ckpt_e1.pth" in res.stdout and clean.exit_code == 0
    a, b = load(tmp_path / "clean" / "checkpoints" / "ckpt_e2.pth"), load(tmp_path / "rb" / "checkpoints" / "ckpt_e2.pth")
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert b["hooks"]["nan_guard"]["rollbacks"] == 1 and a["iter"] == b["iter"] == 6


def test_nan_guard_rollback_budget_and_missing_checkpoint(tmp_path, run_up):
    hooks = [{"type": "nan_guard", "kwargs": {"policy": "rollback", "max_rollbacks": 1}},
             {"type": "test_fault", "kwargs": {"nan_at": [5], "always": True}}]
    res = train(run_up, tmp_path, "budget", small(hooks=hooks), code=1)
    assert "after 1 rollbacks" in str(res.exception)
    hooks[1]["kwargs"]["nan_at"] = [2]  # before any checkpoint exists
    res = train(run_up, tmp_path, "nockpt", small(hooks=hooks), code=1)
    assert "no checkpoint" in str(res.exception)


def test_nan_guard_catches_non_finite_gradients_with_a_finite_loss():
    from up_trainer.hooks.nan_guard import NanGuard

    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.tensor([0.0, float("inf"), 1.0])
    optimizer = torch.optim.SGD([p], lr=1.0)
    optim = SimpleNamespace(optimizer=optimizer, scaler=None)
    tr = SimpleNamespace(state=SimpleNamespace(epoch=1, epoch_iter=0, epoch_len=1), optim=optim,
                         module=SimpleNamespace(parameters=lambda: [p]), dist=SimpleNamespace(enabled=False))
    hook = NanGuard()
    hook.after_backward(tr, 1, torch.tensor(0.5))
    assert p.grad is not None  # gradients are judged once complete, in before_step
    hook.before_step(tr, 1)
    assert p.grad is None and hook.skipped == 1
    optimizer.step()
    assert torch.equal(p.detach(), torch.ones(3))


# -- empty_cache -------------------------------------------------------------------------------
def test_empty_cache_calls_at_the_configured_points(monkeypatch):
    from up_trainer.hooks.empty_cache import EmptyCache

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    hook = EmptyCache(freq=2, after_eval=False)
    for it in range(1, 6):
        hook.after_update(None, it)
    hook.after_epoch(None, 1)
    hook.after_eval(None, {})
    assert len(calls) == hook.calls == 3  # iterations 2 and 4, then the epoch end
    with pytest.raises(Exception, match="freq"):
        EmptyCache(freq=-1)


# -- sync_buffers (real gloo process group, 2 ranks) -------------------------------------------
def _sync_worker(rank, port, out):
    import torch.distributed as dist

    from up_trainer.hooks.sync_buffers import SyncBuffers

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.manual_seed(rank)
        model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.BatchNorm2d(2)).train()
        model(torch.randn(4, 1, 3, 3) * (rank + 1))  # different running statistics per rank
        before = model[1].running_mean.clone()
        tr = SimpleNamespace(dist=SimpleNamespace(enabled=True), module=model)
        SyncBuffers().after_epoch(tr, 1)
        torch.save({"before": before, "after": model[1].running_mean.clone(),
                    "tracked": model[1].num_batches_tracked.clone()}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_sync_buffers_broadcasts_rank0_buffers(tmp_path):
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_sync_worker, args=(port, str(tmp_path / "r")), nprocs=2, join=True)
    r0, r1 = torch.load(tmp_path / "r.0"), torch.load(tmp_path / "r.1")
    assert not torch.equal(r0["before"], r1["before"])
    assert torch.equal(r1["after"], r0["before"]) and torch.equal(r0["after"], r0["before"])


# -- safetensors_export ------------------------------------------------------------------------
def test_safetensors_beside_every_checkpoint_and_rotated_with_it(tmp_path, run_up):
    from safetensors import safe_open
    from safetensors.torch import load_file

    hooks = [{"type": "safetensors_export"}, {"type": "auto_save_best", "kwargs": {"max_keep_ckpts": 1}}]
    train(run_up, tmp_path, "st", small(hooks=hooks))
    ckpts = tmp_path / "st" / "checkpoints"
    names = sorted(n for n in os.listdir(ckpts) if n.endswith(".safetensors"))
    assert "ckpt_e2.safetensors" in names and "ckpt_latest.safetensors" in names
    assert "ckpt_e1.safetensors" not in names  # rotated away with ckpt_e1.pth
    assert os.path.samefile(ckpts / "ckpt_latest.safetensors", ckpts / "ckpt_e2.safetensors")
    ckpt = load(ckpts / "ckpt_e2.pth")
    weights = load_file(ckpts / "ckpt_e2.safetensors")
    assert weights.keys() == ckpt["model"].keys()
    assert all(torch.equal(weights[k], ckpt["model"][k]) for k in weights)
    with safe_open(ckpts / "ckpt_e2.safetensors", "pt") as f:
        assert f.metadata()["epoch"] == "2" and f.metadata()["weights"] == "model"
    best = load(ckpts / "ckpt_best.pth")
    best_w = load_file(ckpts / "ckpt_best.safetensors")
    assert all(torch.equal(best_w[k], best["model"][k]) for k in best_w)


def test_safetensors_missing_is_a_config_error(tmp_path, run_up, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    res = run_up(["train", "--config", write_cfg(tmp_path / "c.yaml", small(hooks=[{"type": "safetensors_export"}])),
                  "--work-dir", tmp_path / "r"])
    assert res.exit_code == 2
    assert "hooks[0].kwargs: safetensors_export needs the optional safetensors package" in res.stderr
    assert "pip install safetensors" in res.stderr


def test_tied_weights_are_exported_once_each():
    from safetensors.torch import load, save

    from up_trainer.hooks.safetensors_export import tensors_for_export

    w = torch.randn(4, 3)
    out = tensors_for_export({"a.weight": w, "b.weight": w, "step": 3})
    back = load(save(out))
    assert set(back) == {"a.weight", "b.weight"} and torch.equal(back["a.weight"], back["b.weight"])
    assert math.isclose(float(back["a.weight"].sum()), float(w.sum()), rel_tol=1e-6)
