"""Distillation with mixed precision (the teachers run inside the student's autocast) and with
activation checkpointing (recomputations do not capture again)."""
import pytest
import torch

from conftest import tiny_cfg, write_cfg
from test_training import kd_cfg, teachers_of
from up_trainer.config import validate
from up_trainer.engine.builder import build_trainer


def test_teachers_run_in_the_students_autocast_precision(tmp_path):
    cfg = kd_cfg(tmp_path, runtime={"seed": 3, "imports": ["dist_plugin"],
                                    "amp": {"enable": True, "dtype": "bfloat16", "force": True}},
                 trainer={"max_epoch": 1}, default_hooks={"insight": None})
    trainer = build_trainer(validate(cfg), work_dir=str(tmp_path), device="cpu")
    seen = []
    teacher = teachers_of(trainer)["teacher"]
    teacher.fc2.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    trainer.train()
    assert seen and set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in teacher.parameters())  # the student's parameter dtype
    losses = {k: v for k, v in trainer.outputs.items() if k.startswith("mimic.")}
    assert losses and all(v.dtype == torch.float32 and torch.isfinite(v) for v in losses.values())


@pytest.mark.slow
def test_memory_checkpoint_with_a_teacher_ends_with_the_same_weights(tmp_path, run_up):
    resnet = {"type": "resnet18", "kwargs": {"num_classes": 10, "in_channels": 1, "small_input": True}}
    distill = {"teachers": [{"name": "teacher", "net": resnet}],
               "mimic": [{"student": ["backbone.layer3", "backbone.fc"],
                          "teachers": {"teacher": ["backbone.layer3", "backbone.fc"]},
                          "losses": {"loss": {"type": "l2_loss"}}}]}
    memckpt = {"type": "memory_checkpoint",
               "kwargs": {"checkpoint_patterns": {"backbone": {"patterns_mode": "level", "level": {"num": 2}}}}}
    runs = {}
    for name, hooks in (("plain", []), ("ckpt", [memckpt])):
        cfg = tiny_cfg(trainer={"max_epoch": 1}, hooks=hooks, distill=distill,
                       dataset={"train": {"type": "digits", "kwargs": {"split": "train", "subset": 32}},
                                "test": {"type": "digits", "kwargs": {"split": "test", "subset": 16}},
                                "batch_size": 16, "test_batch_size": 16},
                       default_hooks={"best": None, "insight": None})
        res = run_up(["train", "--config", write_cfg(tmp_path / f"{name}.yaml", cfg), "--work-dir", tmp_path / name])
        assert res.exit_code == 0, (res.stderr, res.exception)
        runs[name] = (torch.load(tmp_path / name / "checkpoints" / "ckpt_e1.pth", weights_only=True), res.stdout)
    assert "memory_checkpoint: static mode" in runs["ckpt"][1]
    plain, ckpt = runs["plain"][0], runs["ckpt"][0]
    for k, v in plain["model"].items():
        assert torch.equal(v, ckpt["model"][k]), k
