"""auto_save_best: best across resume, NaN/Inf never best, metric key check, max_keep_ckpts."""
import os
from types import SimpleNamespace

import pytest
import torch

from conftest import tiny_cfg, write_cfg
from up_trainer.engine.checkpoint import CheckpointStore
from up_trainer.engine.checkpoint_policy import CheckpointPolicy
from up_trainer.errors import ConfigError
from up_trainer.hooks.auto_save_best import AutoSaveBest


def small(**trainer):
    cfg = tiny_cfg(trainer={"max_epoch": 2, **trainer})
    cfg["runtime"]["num_threads"] = 1
    cfg["dataset"]["train"]["kwargs"]["subset"] = 32  # 2 iterations per epoch
    return cfg


def fake_trainer(tmp_path, epoch=1, keys=("top1", "top5")):
    ev = SimpleNamespace(primary_metric=keys[0], metric_keys=lambda: list(keys))
    return SimpleNamespace(evaluator=ev, state=SimpleNamespace(epoch=epoch), checkpoints=CheckpointPolicy({}),
                           store=CheckpointStore(str(tmp_path)), dist=SimpleNamespace(is_main=True))


def new_hook(**kwargs):
    hook = AutoSaveBest(**kwargs)
    hook.name = "auto_save_best"
    return hook


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_is_never_best(tmp_path, bad):
    tr = fake_trainer(tmp_path)
    hook = new_hook(mode="min")
    hook.before_train(tr)
    hook.after_eval(tr, {"top1": bad})
    assert hook.best is None and tr.checkpoints.requested == []
    hook.after_eval(tr, {"top1": 3.0})
    assert hook.best == 3.0 and tr.checkpoints.requested == ["ckpt_best.pth"]
    tr.checkpoints.requested.clear()
    hook.after_eval(tr, {"top1": bad})
    assert hook.best == 3.0 and tr.checkpoints.requested == []


def test_best_survives_resume_and_a_changed_metric_starts_over(tmp_path):
    tr = fake_trainer(tmp_path, epoch=4)
    hook = new_hook()
    hook.load_state_dict({"best": 90.0, "best_epoch": 2, "metric": "top1"})
    hook.before_train(tr)
    hook.after_eval(tr, {"top1": 80.0})  # worse than the resumed best: no ckpt_best
    assert (hook.best, hook.best_epoch, tr.checkpoints.requested) == (90.0, 2, [])
    hook.after_eval(tr, {"top1": 95.0})
    assert (hook.best, hook.best_epoch) == (95.0, 4)
    other = new_hook(metric="top5")
    other.load_state_dict({"best": 90.0, "best_epoch": 2, "metric": "top1"})
    other.before_train(tr)
    assert other.best is None  # a best of another metric means nothing here


def test_unknown_metric_lists_the_evaluator_keys(tmp_path, run_up):
    cfg = small()
    cfg["hooks"] = [{"type": "auto_save_best", "kwargs": {"metric": "acc"}}]
    res = run_up(["train", "--config", write_cfg(tmp_path / "c.yaml", cfg), "--work-dir", tmp_path / "r"])
    assert res.exit_code == 2, res.stdout[-2000:]
    assert "auto_save_best.kwargs.metric: the evaluator does not produce 'acc'" in res.stderr
    assert "it produces: top1, top5" in res.stderr


def test_bad_kwargs_are_config_errors():
    with pytest.raises(ConfigError, match="max_keep_ckpts"):
        AutoSaveBest(max_keep_ckpts=0)
    with pytest.raises(ConfigError, match="mode"):
        AutoSaveBest(mode="maximum")


def touch(path, data=b"x"):
    path.write_bytes(data)
    return path


def test_rotation_keeps_newest_and_never_latest_or_best(tmp_path):
    for name in ["ckpt_e1.pth", "ckpt_e2-i9.pth", "ckpt_e2.pth", "ckpt_e3.pth", "ckpt_e10.pth", "ckpt_e4.pth"]:
        touch(tmp_path / name, name.encode())
    touch(tmp_path / "ckpt_e1.safetensors")
    touch(tmp_path / "ckpt_e3.safetensors")  # an export goes with its checkpoint
    os.link(tmp_path / "ckpt_e1.pth", tmp_path / "ckpt_latest.pth")  # e.g. a resume pointed latest back
    os.link(tmp_path / "ckpt_e2.pth", tmp_path / "ckpt_best.pth")
    touch(tmp_path / "notes.txt")
    tr = fake_trainer(tmp_path)
    new_hook(max_keep_ckpts=2).before_train(tr)  # the hook sets the policy's keep-N
    removed = tr.checkpoints.rotate(tr.store)
    left = sorted(os.listdir(tmp_path))
    assert left == ["ckpt_best.pth", "ckpt_e1.pth", "ckpt_e1.safetensors", "ckpt_e10.pth", "ckpt_e4.pth",
                    "ckpt_latest.pth", "notes.txt"]
    assert sorted(os.path.basename(p) for p in removed) == ["ckpt_e2-i9.pth", "ckpt_e2.pth", "ckpt_e3.pth",
                                                            "ckpt_e3.safetensors"]
    assert (tmp_path / "ckpt_best.pth").read_bytes() == b"ckpt_e2.pth"  # best is its own name
    tr = fake_trainer(tmp_path)
    new_hook(max_keep_ckpts=-1).before_train(tr)
    assert tr.checkpoints.rotate(tr.store) == []


def test_max_keep_ckpts_end_to_end_with_resume(tmp_path, run_up):
    """4 epochs in two runs, max_keep_ckpts 2: every run ends with the newest two files, and
    ckpt_best.pth holds the best of all four evaluations (its value kept across the resume)."""
    run_dir = tmp_path / "r"
    hooks = [{"type": "auto_save_best", "kwargs": {"max_keep_ckpts": 2}}]
    first = small(max_epoch=3)
    first["hooks"] = hooks
    res = run_up(["train", "--config", write_cfg(tmp_path / "a.yaml", first), "--work-dir", run_dir])
    assert res.exit_code == 0, (res.stdout[-3000:], res.exception)
    ckpts = run_dir / "checkpoints"
    files = sorted(n for n in os.listdir(ckpts) if not n.startswith("."))
    assert files == ["ckpt_best.pth", "ckpt_e2.pth", "ckpt_e3.pth", "ckpt_latest.pth"]
    assert "max_keep_ckpts=2: removed ckpt_e1.pth" in res.stdout
    best_before = torch.load(ckpts / "ckpt_e3.pth", weights_only=True)["hooks"]["auto_save_best"]["best"]

    second = small(max_epoch=4)
    second["hooks"] = hooks
    second["saver"] = {"save_dir": "checkpoints", "auto_resume": True}
    res = run_up(["train", "--config", write_cfg(tmp_path / "b.yaml", second), "--work-dir", run_dir])
    assert res.exit_code == 0, (res.stdout[-3000:], res.exception)
    files = sorted(n for n in os.listdir(ckpts) if not n.startswith("."))
    assert files == ["ckpt_best.pth", "ckpt_e3.pth", "ckpt_e4.pth", "ckpt_latest.pth"]
    last = torch.load(ckpts / "ckpt_e4.pth", weights_only=True)
    best = torch.load(ckpts / "ckpt_best.pth", weights_only=True)
    state = last["hooks"]["auto_save_best"]
    assert state["best"] == max(best_before, last["state"]["metrics"]["top1"]) == best["metric_val"]
    assert best["epoch"] == state["best_epoch"]
