"""The distill section and UP's distiller files at `up config` time: translation, module
names resolved against the built nets, one-line refusals."""
import os

import pytest
import yaml

from conftest import REPO, invoke, tiny_cfg, write_cfg
from up_trainer.config import resolve_config
from up_trainer.config.schema import SECTIONS
from up_trainer.distill.spec import read_spec
from up_trainer.errors import ConfigError

UP_DISTILLER = os.path.join(REPO, "tests", "fixtures", "up", "distiller")
CLS_FILES = ["res18_kd.yaml", "res18_kd_bag_of_tricks.yaml"]
# each Faster R-CNN file: the one line `up config` stops with (what is missing)
DET_REFUSALS = {
    "faster_rcnn_r152_50_1x_feature_mimic.yaml": "distill.mimic[0].student[0]: the student has no module "
                                                 "'neck.p2_conv' (nearest: neck.layer_blocks",
    "faster_rcnn_r152_50_1x_sample_feature_mimic.yaml": "mimic.mimic_ins_type: UP's SampleFeature mimic",
    "faster_rcnn_r152_50_1x_decouple_feature_mimic.yaml": "mimic.mimic_ins_type: UP's DeFeat mimic",
    "faster_rcnn_r152_50_1x_frs.yaml": "mimic.mimic_ins_type: UP's FRS mimic",
    "faster_rcnn_r152_50_1x_multi_jobs_multi_teacheres.yaml": "mimic.mimic_job0.mimic_ins_type: UP's FRS mimic",
}


def teacher_cfg(**job):
    teacher = {"name": "teacher", "net": {"type": "resnet18", "kwargs": {"num_classes": 10, "in_channels": 1,
                                                                          "small_input": True}}}
    mimic = {"student": ["backbone.fc"], "teachers": {"teacher": ["backbone.fc"]},
             "losses": {"loss": {"type": "kd_loss", "kwargs": {"T": 4}}}}
    mimic.update(job)
    return tiny_cfg(distill={"teachers": [teacher], "mimic": [mimic]})


def one_line_error(res):
    assert res.exit_code == 2, (res.stdout[-2000:], res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("up: error: "), res.stderr
    return lines[0][len("up: error: "):]


@pytest.mark.parametrize("name", CLS_FILES)
def test_ups_cls_distiller_files_pass_up_config_unchanged(name):
    res = invoke(["config", "--config", os.path.join(UP_DISTILLER, "cls", name)])
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert "teacher and mimic read as distill" in res.stdout
    distill = yaml.safe_load(res.stdout)["distill"]
    (teacher,) = distill["teachers"]
    assert teacher["name"] == "teacher" and teacher["weight"] == "teacher.pth.tar"
    assert teacher["net"][0]["type"] == "resnet152" and teacher["bn_mode"] == "eval"
    (job,) = distill["mimic"]
    assert job["student"] == ["head.classifier"] and job["teachers"] == {"teacher": ["head.classifier"]}
    assert job["losses"]["loss"] == {"type": "kl_loss", "kwargs": {"loss_weight": 1.0}}


@pytest.mark.parametrize("name", sorted(DET_REFUSALS))
def test_ups_faster_rcnn_distiller_files_stop_in_one_line(name):
    res = invoke(["config", "--config", os.path.join(UP_DISTILLER, "det", "faster_rcnn", name)])
    assert one_line_error(res).startswith(DET_REFUSALS[name])


def test_a_wrong_module_name_is_one_line_naming_the_nearest(tmp_path):
    cfg = write_cfg(tmp_path / "kd.yaml", teacher_cfg(student=["backbone.layer4.1.con2"]))
    msg = one_line_error(invoke(["config", "--config", cfg]))
    assert msg.startswith("distill.mimic[0].student[0]: the student has no module 'backbone.layer4.1.con2'")
    assert "nearest: backbone.layer4.1.conv2" in msg


def test_a_wrong_teacher_module_name_names_the_teacher(tmp_path):
    job = {"teachers": {"teacher": ["backbone.fcc"]}}
    msg = one_line_error(invoke(["config", "--config", write_cfg(tmp_path / "kd.yaml", teacher_cfg(**job))]))
    assert msg.startswith("distill.mimic[0].teachers.teacher: the teacher teacher has no module 'backbone.fcc'")
    assert "backbone.fc" in msg


def test_native_section_passes_and_is_printed(tmp_path):
    res = invoke(["config", "--config", write_cfg(tmp_path / "kd.yaml", teacher_cfg())])
    assert res.exit_code == 0, res.stderr
    assert yaml.safe_load(res.stdout)["distill"]["mimic"][0]["losses"]["loss"]["kwargs"] == {"T": 4}


@pytest.mark.parametrize("job, path", [
    ({"type": "FRS"}, "distill.mimic[0].type"),
    ({"losses": {"loss": {"type": "bce_loss"}}}, "distill.mimic[0].losses.loss.type"),
    ({"losses": {"loss": {"type": "kd_loss", "kwargs": {"temperature": 4}}}},
     "distill.mimic[0].losses.loss.kwargs.temperature"),
    ({"losses": {"loss": {"type": "kd_loss", "kwargs": {"T": 0}}}}, "distill.mimic[0].losses.loss.kwargs.T"),
    ({"teachers": {"teacher": ["backbone.fc", "backbone.layer4"]}}, "distill.mimic[0].teachers.teacher"),
    ({"teachers": {"teachr": ["backbone.fc"]}}, "distill.mimic[0].teachers.teachr"),
    ({"warm_up_iters": 1.5}, "distill.mimic[0].warm_up_iters"),
    ({"adapter": {"kernel_size": 5}}, "distill.mimic[0].adapter.kernel_size"),
    ({"mimic_name": ["x"]}, "distill.mimic[0].mimic_name"),
])
def test_native_mistakes_name_their_key(job, path):
    section = teacher_cfg(**job)["distill"]
    with pytest.raises(ConfigError) as err:
        read_spec(section)
    assert err.value.path == path, str(err.value)


def test_base_loss_kwargs_merge_onto_ups_default_l2():
    spec = read_spec(teacher_cfg(losses={"loss": {"type": "l2_loss", "kwargs": {"batch_mean": False}}})["distill"])
    assert spec.jobs[0].loss.kwargs == {"feat_norm": True, "batch_mean": False}
    spec = read_spec(teacher_cfg(losses={})["distill"])
    assert (spec.jobs[0].loss.type, spec.jobs[0].loss.kwargs) == ("l2_loss", {"feat_norm": True, "batch_mean": True})


def _up_file(tmp_path, **changes):
    with open(os.path.join(UP_DISTILLER, "cls", "res18_kd.yaml")) as f:
        cfg = yaml.safe_load(f)
    # anchors-only keys (num_classes: &num_classes 1000) lose their aliases in a re-dump
    cfg = {k: v for k, v in cfg.items() if k in SECTIONS + ["teacher", "mimic"]}
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    return write_cfg(tmp_path / "up.yaml", cfg)


def test_without_the_kd_runner_teacher_and_mimic_are_ignored_as_in_up(tmp_path):
    cfg = resolve_config(_up_file(tmp_path, runtime={"runner": {"type": "base"}}))
    assert "distill" not in cfg
    assert any(n.startswith("teacher: ignored as in UP") for n in cfg["origin"]["notes"])


def test_an_unknown_up_runner_and_unread_mimic_keys_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^runtime.runner.type: UP's 'quant' runner is not mapped"):
        resolve_config(_up_file(tmp_path, runtime={"runner": {"type": "quant"}}))
    with open(os.path.join(UP_DISTILLER, "cls", "res18_kd.yaml")) as f:
        mimic = yaml.safe_load(f)["mimic"]
    mimic["teacher"]["teacher_bn"] = "train"
    with pytest.raises(ConfigError, match=r"^mimic.teacher.teacher_bn: is not read by UP's kd runner"):
        resolve_config(_up_file(tmp_path, mimic=mimic))
