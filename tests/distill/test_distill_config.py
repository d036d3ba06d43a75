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
DET_DIR = os.path.join(UP_DISTILLER, "det", "faster_rcnn")
# each Faster R-CNN file: its jobs' types and the adapt parts its ADAP entries become
DET_FILES = {
    "faster_rcnn_r152_50_1x_feature_mimic.yaml": (["base"], []),
    "faster_rcnn_r152_50_1x_sample_feature_mimic.yaml": (["SampleFeature"], []),
    "faster_rcnn_r152_50_1x_decouple_feature_mimic.yaml": (["DeFeat"], ["backbone_adapt", "neck_adapt"]),
    "faster_rcnn_r152_50_1x_frs.yaml": (["FRS"], ["neck_adapt"]),
    "faster_rcnn_r152_50_1x_multi_jobs_multi_teacheres.yaml": (["FRS", "base"], ["neck_adapt"]),
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


@pytest.mark.parametrize("name", sorted(DET_FILES))
def test_ups_faster_rcnn_distiller_files_pass_up_config_unchanged(name):
    res = invoke(["config", "--config", os.path.join(DET_DIR, name)])
    assert res.exit_code == 0, (res.stderr, res.exception)
    cfg = yaml.safe_load(res.stdout)
    types, adapt = DET_FILES[name]
    assert [job["type"] for job in cfg["distill"]["mimic"]] == types
    assert [part["name"] for part in cfg["distill"].get("adapt", [])] == adapt
    assert all(entry["type"] != "ADAP" for entry in cfg["net"])  # taken out of the student's net


def test_ups_det_files_options_and_losses_split_by_the_types_slots():
    cfg = resolve_config(os.path.join(DET_DIR, "faster_rcnn_r152_50_1x_sample_feature_mimic.yaml"))
    (job,) = cfg["distill"]["mimic"]
    assert set(job["losses"]) == {"feature_loss"}
    assert job["options"]["rcnn_fpn_strides"] == [4, 8, 16, 32] and job["options"]["teacher_proposal"] is True
    cfg = resolve_config(os.path.join(DET_DIR, "faster_rcnn_r152_50_1x_decouple_feature_mimic.yaml"))
    spec = read_spec(cfg["distill"])
    assert set(spec.jobs[0].losses) == {"backbone_loss", "neck_fg_loss", "neck_bg_loss"}
    assert spec.jobs[0].losses["neck_bg_loss"].kwargs["loss_weight"] == 16.0
    backbone_adapt = spec.adapt[0]
    assert (backbone_adapt.on, backbone_adapt.levels, backbone_adapt.outplanes) == ("backbone", [1, 2, 3],
                                                                                     [512, 1024, 2048])
    assert backbone_adapt.with_relu and backbone_adapt.small_init and backbone_adapt.out_name == "adapt_bb_features"


def test_a_teacher_list_that_stops_at_the_rpn_is_completed_and_loads_only_its_parts():
    cfg = resolve_config(os.path.join(DET_DIR, "faster_rcnn_r152_50_1x_multi_jobs_multi_teacheres.yaml"))
    teachers = cfg["distill"]["teachers"]
    assert [t["name"] for t in teachers] == ["teacher0", "teacher1", "teacher2"]
    for t in teachers:
        assert t["parts"] == ["backbone", "neck", "roi_head"]
        assert [e["type"] for e in t["net"]][:3] == ["resnet152", "FPN", "NaiveRPN"]
        assert [e["name"] for e in t["net"]][3:] == ["post_process", "bbox_head_pre_process", "bbox_head",
                                                     "bbox_head_post_process"]
    assert any("teacher0: the teacher stops at roi_head" in n for n in cfg["origin"]["notes"])


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
    ({"type": "DeFeet"}, "distill.mimic[0].type"),
    ({"type": "FRS", "losses": {"loss": {"type": "l2_loss"}}}, "distill.mimic[0].losses.loss"),
    ({"type": "FRS", "losses": {"neck_loss": {"type": "kd_loss"}}}, "distill.mimic[0].losses.neck_loss.type"),
    ({"type": "SampleFeature", "losses": {}, "options": {"student_roipooler": "x"}},
     "distill.mimic[0].options.student_roipooler"),
    ({"type": "SampleFeature", "losses": {}, "options": {"rcnn_fpn_levels": [0, 4]}},
     "distill.mimic[0].options.rcnn_fpn_strides"),
    ({"type": "base", "options": {"pool_size": 7}}, "distill.mimic[0].options.pool_size"),
    ({"type": "DeFeat", "losses": {}, "options": {"neck_feature_nums": 1}},
     "distill.mimic[0].options.neck_feature_nums"),
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
    assert spec.jobs[0].losses["loss"].kwargs == {"feat_norm": True, "batch_mean": False}
    spec = read_spec(teacher_cfg(losses={})["distill"])
    loss = spec.jobs[0].losses["loss"]
    assert (loss.type, loss.kwargs) == ("l2_loss", {"feat_norm": True, "batch_mean": True})


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
    with pytest.raises(ConfigError, match=r"^runtime.runner.type: UP's 'made_up' runner is not mapped"):
        resolve_config(_up_file(tmp_path, runtime={"runner": {"type": "made_up"}}))
    with open(os.path.join(UP_DISTILLER, "cls", "res18_kd.yaml")) as f:
        mimic = yaml.safe_load(f)["mimic"]
    mimic["teacher"]["teacher_bn"] = "train"
    with pytest.raises(ConfigError, match=r"^mimic.teacher.teacher_bn: is not read by UP's kd runner"):
        resolve_config(_up_file(tmp_path, mimic=mimic))
