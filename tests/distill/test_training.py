"""Training with a teacher: the teacher frozen and left out of everything the student owns
(optimizer, checkpoints, EMA), the mimic losses in the outputs and metrics, adapters trained,
a mid-epoch resume bitwise equal to the straight run."""
import json
import os

import torch

from conftest import invoke, tiny_cfg, write_cfg
from up_trainer.config import validate
from up_trainer.distill import DistillHook
from up_trainer.engine.builder import build_trainer

MLP = {"type": "dist_mlp", "kwargs": {"hidden": 16}}
TEACHER_MLP = {"type": "dist_mlp", "kwargs": {"hidden": 32}}


def teacher_weights(tmp_path):
    """A fixed teacher state dict on disk (the dist_mlp of tests/plugins/dist_plugin.py)."""
    import dist_plugin

    torch.manual_seed(11)
    path = tmp_path / "teacher.pth"
    torch.save(dist_plugin.TestMLP(hidden=32).state_dict(), path)
    return str(path)


def kd_cfg(tmp_path, **sections):
    distill = {
        "teachers": [{"name": "teacher", "net": TEACHER_MLP, "weight": teacher_weights(tmp_path)}],
        "mimic": [{"name": "logits", "student": ["fc2"], "teachers": {"teacher": ["fc2"]},
                   "losses": {"loss": {"type": "kd_loss", "kwargs": {"T": 4}}}, "loss_weight": 0.5,
                   "warm_up_iters": 3},
                  {"name": "hidden", "student": ["fc1"], "teachers": {"teacher2": ["fc1"]},
                   "losses": {"loss": {"type": "l2_loss", "kwargs": {"feat_norm": False}}}, "adapter": True}],
    }
    distill["teachers"].append(dict(distill["teachers"][0], name="teacher2"))
    base = {"runtime": {"seed": 3, "imports": ["dist_plugin"]}, "net": MLP, "distill": distill,
            "hooks": [{"type": "train_val_logger", "kwargs": {"freq": 1}}]}
    base.update(sections)
    return tiny_cfg(**base)


def teachers_of(trainer):
    (hook,) = [h for h in trainer.hooks if isinstance(h, DistillHook)]
    return hook.distiller.teachers


def test_teacher_frozen_and_outside_the_students_state(tmp_path):
    trainer = build_trainer(validate(kd_cfg(tmp_path, trainer={"max_epoch": 1})), work_dir=str(tmp_path),
                            device="cpu")
    teachers = teachers_of(trainer)
    before = {n: {k: v.clone() for k, v in t.state_dict().items()} for n, t in teachers.items()}
    adapter_before = {k: v.clone() for k, v in trainer.module.distill_adapters.state_dict().items()}
    trainer.train()
    for name, teacher in teachers.items():
        assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
        for key, value in teacher.state_dict().items():
            assert torch.equal(value, before[name][key]), (name, key)
        assert not any(p is q for p in teacher.parameters() for g in trainer.optim.optimizer.param_groups
                       for q in g["params"])
    # the adapter (16 -> 32 hidden units) trained with the student; the teachers are in no checkpoint
    after = trainer.module.distill_adapters.state_dict()
    assert any(not torch.equal(after[k], adapter_before[k]) for k in after)
    ckpt = torch.load(tmp_path / "checkpoints" / "ckpt_e1.pth", weights_only=True)
    assert sorted(ckpt["model"]) == sorted(["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                            "distill_adapters.hidden__teacher2__0.conv.weight",
                                            "distill_adapters.hidden__teacher2__0.conv.bias"])
    student_params = sum(1 for _ in trainer.module.parameters())
    assert sum(len(g["params"]) for g in ckpt["optimizer"]["param_groups"]) == student_params == 6
    assert set(ckpt["hooks"]["distill"]["teachers"]) == {"teacher", "teacher2"}
    # the mimic losses are losses like any other: in the outputs, the total and the metrics
    assert {"loss", "mimic.logits.teacher.loss", "mimic.hidden.teacher2.loss"} <= set(trainer.outputs)
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    train_rows = [r for r in rows if r.get("phase") == "train"]
    assert train_rows and all("mimic.logits.teacher.loss" in r for r in train_rows)
    # warm_up_iters 3: the first iteration's weight is 0 * loss_weight
    assert train_rows[0]["mimic.logits.teacher.loss"] == 0.0
    assert train_rows[-1]["mimic.logits.teacher.loss"] > 0.0


def test_eval_of_a_distilled_checkpoint_uses_the_bare_student(tmp_path):
    cfg = write_cfg(tmp_path / "kd.yaml", kd_cfg(tmp_path, trainer={"max_epoch": 1}))
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
    assert res.exit_code == 0, (res.stderr, res.exception)
    res = invoke(["eval", "--config", cfg, "--checkpoint", tmp_path / "run" / "checkpoints" / "ckpt_e1.pth"])
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert "adapter tensors of the training run left out" in res.stdout


def test_resume_mid_epoch_with_a_teacher_is_bitwise(tmp_path):
    # iter_base: checkpoints every 9 iterations (epochs of 6): ckpt_e2-i9.pth is mid-epoch
    cfg = kd_cfg(tmp_path, runtime={"seed": 3, "imports": ["dist_plugin"], "iter_base": True},
                 trainer={"max_epoch": 3, "save_freq": 9, "is_eval": False,
                          "optimizer": {"type": "SGD", "kwargs": {"lr": 0.05, "momentum": 0.9}}})
    path = write_cfg(tmp_path / "kd.yaml", cfg)
    straight = tmp_path / "straight"
    res = invoke(["train", "--config", path, "--work-dir", straight])
    assert res.exit_code == 0, (res.stderr, res.exception)
    mid = straight / "checkpoints" / "ckpt_e2-i9.pth"
    assert mid.exists(), os.listdir(straight / "checkpoints")
    resumed = tmp_path / "resumed"
    res = invoke(["train", "--config", path, "--work-dir", resumed, "--resume", mid])
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert "resumed from" in res.stdout
    a = torch.load(straight / "checkpoints" / "ckpt_e3.pth", weights_only=True)
    b = torch.load(resumed / "checkpoints" / "ckpt_e3.pth", weights_only=True)
    assert a["iter"] == b["iter"] == 18
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert torch.equal(sa["momentum_buffer"], sb["momentum_buffer"])
