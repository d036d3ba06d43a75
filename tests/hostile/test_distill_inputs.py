"""Hostile input to distillation: the distill section, UP's teacher/mimic keys and teacher
weight files. Each is one line naming the key or the file (exit 2), never a traceback."""
import os

import pytest
import torch
import yaml

from conftest import REPO, invoke, tiny_cfg, write_cfg
from up_trainer.config import resolve_config
from up_trainer.config.schema import SECTIONS
from up_trainer.distill.spec import read_spec
from up_trainer.errors import ConfigError

MLP = {"type": "dist_mlp", "kwargs": {"hidden": 8}}


def section(teacher=None, job=None, **top):
    t = {"name": "teacher", "net": MLP}
    t.update(teacher or {})
    j = {"student": ["fc2"], "teachers": {"teacher": ["fc2"]}}
    j.update(job or {})
    out = {"teachers": [t], "mimic": [j]}
    out.update(top)
    return out


@pytest.mark.parametrize("distill, path", [
    ({"teachers": [], "mimic": []}, "distill.teachers"),
    ({"teachers": "resnet18", "mimic": []}, "distill.teachers"),
    ({"teachers": [{"net": MLP}], "mimic": "all"}, "distill.mimic"),
    (section(task_loss="yes"), "distill.task_loss"),
    (section(teacher={"name": "the teacher"}), "distill.teachers[0].name"),
    (section(teacher={"name": "__class__\n"}), "distill.teachers[0].name"),
    (section(teacher={"net": None}), "distill.teachers[0].net"),
    (section(teacher={"weight": 7}), "distill.teachers[0].weight"),
    (section(teacher={"weight": ""}), "distill.teachers[0].weight"),
    (section(teacher={"bn_mode": "frozen"}), "distill.teachers[0].bn_mode"),
    (section(teacher={"extra": 1}), "distill.teachers[0].extra"),
    (section(job={"student": []}), "distill.mimic[0].student"),
    (section(job={"student": "fc2"}), "distill.mimic[0].student"),
    (section(job={"student": [None]}), "distill.mimic[0].student"),
    (section(job={"student": [{"fc2": 1}]}), "distill.mimic[0].student"),
    (section(job={"teachers": ["teacher"]}), "distill.mimic[0].teachers"),
    (section(job={"teachers": {"teacher": "fc2"}}), "distill.mimic[0].teachers.teacher"),
    (section(job={"loss_weight": float("nan")}), "distill.mimic[0].loss_weight"),
    (section(job={"loss_weight": True}), "distill.mimic[0].loss_weight"),
    (section(job={"losses": {"loss": {"type": "kd_loss", "kwargs": {"T": float("inf")}}}}),
     "distill.mimic[0].losses.loss.kwargs.T"),
    (section(job={"losses": {"loss": {"type": "kd_loss", "kwargs": {"T": "4"}}}}),
     "distill.mimic[0].losses.loss.kwargs.T"),
    (section(job={"losses": {"loss": {"type": "l2_loss", "kwargs": {"batch_mean": 1}}}}),
     "distill.mimic[0].losses.loss.kwargs.batch_mean"),
    (section(job={"losses": {"loss": {"type": "kl_loss", "kwargs": {"norm": "l1"}}}}),
     "distill.mimic[0].losses.loss.kwargs.norm"),
    (section(job={"losses": {"loss": "kd_loss"}}), "distill.mimic[0].losses.loss"),
    (section(job={"losses": {"neck_loss": {"type": "l2_loss"}}}), "distill.mimic[0].losses.neck_loss"),
    (section(job={"adapter": "yes"}), "distill.mimic[0].adapter"),
    (section(job={"adapter": {"channels": [[8]]}}), "distill.mimic[0].adapter.channels"),
    (section(job={"adapter": {"channels": [[8, -1]]}}), "distill.mimic[0].adapter.channels"),
    (section(job={"adapter": {"channels": [[8, 10], [8, 10]]}}), "distill.mimic[0].adapter.channels"),
    (section(job={"name": "a.b"}), "distill.mimic[0].name"),
    ({"teachers": [{"name": "t", "net": MLP}, {"name": "t", "net": MLP}],
      "mimic": [{"student": ["fc2"], "teachers": {"t": ["fc2"]}}]}, "distill.teachers[1].name"),
    ({"teachers": [{"name": "t", "net": MLP}, {"name": "u", "net": MLP}],
      "mimic": [{"student": ["fc2"], "teachers": {"t": ["fc2"]}}]}, "distill.teachers[1].name"),
    ({"teachers": [{"name": "t", "net": MLP}],
      "mimic": [{"student": ["fc2"], "teachers": {"t": ["fc2"]}},
                {"student": ["fc1"], "teachers": {"t": ["fc1"]}}]}, "distill.mimic[1].teachers.t"),
])
def test_bad_distill_sections_name_the_key(distill, path):
    with pytest.raises(ConfigError) as err:
        read_spec(distill)
    assert err.value.path == path, str(err.value)
    assert "\n" not in str(err.value)


def test_a_distill_section_that_is_not_a_mapping_is_one_line(tmp_path):
    res = invoke(["config", "--config", write_cfg(tmp_path / "c.yaml", tiny_cfg(distill=[1, 2]))])
    assert res.exit_code == 2 and res.stderr.startswith("up: error: distill: expected dict, got list")


def up_cls(tmp_path, mutate):
    with open(os.path.join(REPO, "tests", "fixtures", "up", "distiller", "cls", "res18_kd.yaml")) as f:
        cfg = yaml.safe_load(f)
    # anchors-only keys (num_classes: &num_classes 1000, transform definitions) are not re-dumped
    cfg = {k: v for k, v in cfg.items() if k in SECTIONS + ["teacher", "mimic"]}
    mutate(cfg)
    return write_cfg(tmp_path / "up.yaml", cfg)


@pytest.mark.parametrize("mutate, start", [
    (lambda c: c.__setitem__("mimic", [1]), "mimic: expected a mapping"),
    (lambda c: c["mimic"].__setitem__("mimic_as_jobs", "yes"), "mimic.mimic_as_jobs: must be true"),
    (lambda c: c["mimic"].__setitem__("teacher", "teacher.pth"), "mimic.teacher: expected a mapping"),
    (lambda c: c["mimic"].__setitem__("student", ["head.classifier"]), "mimic.student: expected {mimic_name"),
    (lambda c: c["mimic"].__setitem__("teacher9", {"mimic_name": ["x"]}), "mimic.teacher9: no top-level teacher9"),
    (lambda c: c["mimic"]["cfgs"].__setitem__("neck_loss", {}), "mimic.cfgs.neck_loss: is not read by UP's base"),
    (lambda c: c["mimic"].pop("student"), "mimic.student: required key is missing"),
    (lambda c: c.pop("teacher"), "teacher: runtime.runner kd needs a teacher net"),
    (lambda c: c["runtime"].__setitem__("runner", {"type": ["kd"]}), "runtime.runner.type: UP's ['kd'] runner"),
])
def test_bad_up_distiller_keys_are_one_line(tmp_path, mutate, start):
    with pytest.raises(ConfigError) as err:
        resolve_config(up_cls(tmp_path, mutate))
    assert str(err.value).startswith(start), str(err.value)


def train_with_weight(tmp_path, weight):
    cfg = tiny_cfg(runtime={"seed": 3, "imports": ["dist_plugin"]}, net=MLP, trainer={"max_epoch": 1},
                   distill=section(teacher={"weight": str(weight)}))
    return invoke(["train", "--config", write_cfg(tmp_path / "kd.yaml", cfg), "--work-dir", tmp_path / "run"])


def one_line(res):
    assert res.exit_code == 2, (res.stderr, res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("up: error: "), res.stderr
    return lines[0]


def test_teacher_weight_files_that_cannot_teach_are_one_line(tmp_path):
    assert "distill.teachers[0].weight" in one_line(train_with_weight(tmp_path, tmp_path / "absent.pth"))
    assert "distill.teachers[0].weight" in one_line(train_with_weight(tmp_path, tmp_path))  # a directory
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"\x80\x02not a pickle at all" * 10)
    assert "distill.teachers[0].weight" in one_line(train_with_weight(tmp_path, garbage))
    other = tmp_path / "other.pth"  # a state dict of another net: nothing of the teacher in it
    torch.save({"conv.weight": torch.zeros(3, 3)}, other)
    line = one_line(train_with_weight(tmp_path, other))
    assert "does not fit teacher 'teacher'" in line and "fc1.weight" in line
    wrong_shape = tmp_path / "wide.pth"  # the teacher's keys at another width
    import dist_plugin

    torch.save(dist_plugin.TestMLP(hidden=9).state_dict(), wrong_shape)
    assert "shaped differently" in one_line(train_with_weight(tmp_path, wrong_shape))


def test_an_empty_distill_section_is_refused_not_ignored(tmp_path):
    res = invoke(["config", "--config", write_cfg(tmp_path / "c.yaml", tiny_cfg(distill={}))])
    assert one_line(res).startswith("up: error: distill.teachers: expected a non-empty list")



class SpareMLP(torch.nn.Module):
    """dist_mlp with a layer its forward never calls."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, small_input: bool = False):
        super().__init__()
        import dist_plugin

        self.net = dist_plugin.TestMLP(hidden=8, num_classes=num_classes)
        self.spare = torch.nn.Linear(8, 10)

    def forward(self, batch):
        return self.net(batch)


def test_a_module_off_the_forward_path_is_one_line(tmp_path):
    from up_trainer.registry import MODELS

    if "distill_spare_mlp" not in MODELS:
        MODELS.register("distill_spare_mlp")(SpareMLP)
    cfg = tiny_cfg(runtime={"seed": 3, "imports": ["dist_plugin"]}, trainer={"max_epoch": 1},
                   net={"type": "distill_spare_mlp"},
                   distill=section(job={"student": ["spare"], "teachers": {"teacher": ["fc2"]}}))
    res = invoke(["train", "--config", write_cfg(tmp_path / "kd.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert one_line(res) == ("up: error: distill.mimic[0].student: the student module spare did not run in its "
                             "forward (name a module on the forward path (not a loss or post-process part, nor a "
                             "BatchNorm under runtime.sync_bn))")
