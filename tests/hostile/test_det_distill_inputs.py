"""Hostile input to the detection distillers read from UP's Faster R-CNN files: an unknown
mimic type, module names that match nothing, a teacher without what its job reads, UP's ADAP
parts and mimic options out of range. Each is one line naming the key (exit 2)."""
import os

import pytest
import yaml

from conftest import UP_FIXTURES, invoke, write_cfg
from up_trainer.config.schema import SECTIONS

DET_DIR = os.path.join(UP_FIXTURES, "distiller", "det", "faster_rcnn")
RETINA = os.path.join(UP_FIXTURES, "det", "retinanet-r50_1x.yaml")


def up_file(tmp_path, name, change):
    """UP's file ``name`` with ``change(cfg)`` applied (anchor-only top-level keys dropped:
    a re-dump inlines what they held)."""
    with open(os.path.join(DET_DIR, name)) as f:
        cfg = yaml.safe_load(f)
    cfg = {k: v for k, v in cfg.items() if k in SECTIONS or "teacher" in k or k == "mimic"}
    change(cfg)
    return write_cfg(tmp_path / "up.yaml", cfg)


def one_line(res):
    assert res.exit_code == 2, (res.stdout[-1500:], res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("up: error: ") and "Traceback" not in res.stderr, res.stderr
    return lines[0][len("up: error: "):]


def set_mimic(**values):
    return lambda cfg: cfg["mimic"].update(values)


def student_names(names):
    return lambda cfg: cfg["mimic"]["student"].update(mimic_name=names)


def retina_teacher(cfg):
    with open(RETINA) as f:
        cfg["teacher"] = yaml.safe_load(f)["net"]  # its FPN: levels 3..7, the extra ones by conv
    cfg["mimic"]["teacher"]["mimic_name"] = [f"neck.p{level}_conv" for level in range(3, 8)]


def adap_kwargs(**values):
    def change(cfg):
        next(e for e in cfg["net"] if e["type"] == "ADAP")["kwargs"].update(values)
    return change


def sample_options(**values):
    return lambda cfg: cfg["mimic"]["cfgs"].update(values)


CASES = [
    # an unknown mimic type: the built ones listed
    ("faster_rcnn_r152_50_1x_feature_mimic.yaml", set_mimic(mimic_ins_type="FeatureRichness"),
     "distill.mimic[0].type: unknown mimic type 'FeatureRichness' (built: base, SampleFeature, FRS, DeFeat)"),
    # a UP FPN name beyond the net's levels: the nearest names and how UP's names map
    ("faster_rcnn_r152_50_1x_feature_mimic.yaml",
     student_names(["neck.p2_conv", "neck.p3_conv", "neck.p4_conv", "neck.p5_conv", "neck.p9_pool"]),
     "distill.mimic[0].student[4]: the student has no module 'neck.p9_pool' (nearest: "),
    # FRS reads the RPN's objectness; a RetinaNet teacher has none
    ("faster_rcnn_r152_50_1x_frs.yaml", retina_teacher,
     "distill.mimic[0].teachers.teacher: FRS mimic reads the RPN head's objectness logits (a two-stage detector) "
     "from roi_head.head: the teacher teacher has no module 'roi_head.head'"),
    # UP's ADAP: a kwarg it does not have, a level the neck does not give
    ("faster_rcnn_r152_50_1x_frs.yaml", adap_kwargs(padding=1), "net[7].kwargs.padding: is not read by UP's ADAP"),
    ("faster_rcnn_r152_50_1x_frs.yaml", adap_kwargs(out_layers=[0, 1, 2, 3, 5], outplanes=256),
     "distill.adapt[0].levels: level 5 but neck gives 5 maps"),
    # SampleFeature: a UP pooler module name (not read), levels without strides
    ("faster_rcnn_r152_50_1x_sample_feature_mimic.yaml", sample_options(student_roipooler="bbox_head.roipool"),
     "distill.mimic[0].options.student_roipooler: UP's student_roipooler is not read"),
    ("faster_rcnn_r152_50_1x_sample_feature_mimic.yaml", sample_options(rcnn_fpn_levels=[0, 1, 2, 3, 4]),
     "distill.mimic[0].options.rcnn_fpn_strides: 4 strides for levels [0, 1, 2, 3, 4]"),
    # DeFeat: every named map counted as the neck's leaves none for the backbone loss
    ("faster_rcnn_r152_50_1x_decouple_feature_mimic.yaml", sample_options(neck_feature_nums=8),
     "distill.mimic[0].options.neck_feature_nums: 8 neck maps leave none of the 8 student modules"),
    # FRS's score loss in an l2 slot
    ("faster_rcnn_r152_50_1x_frs.yaml", sample_options(neck_loss={"type": "bce_loss"}),
     "distill.mimic[0].losses.neck_loss.type: bce_loss does not fit this slot (it takes l2_loss)"),
]


@pytest.mark.parametrize("name, change, start", CASES, ids=[c[2].split(":")[0] + "-" + str(i) for i, c in
                                                            enumerate(CASES)])
def test_det_distiller_mistakes_are_one_line(tmp_path, name, change, start):
    msg = one_line(invoke(["config", "--config", up_file(tmp_path, name, change)]))
    assert msg.startswith(start), msg


def test_an_unknown_name_says_how_ups_names_map(tmp_path):
    msg = one_line(invoke(["config", "--config", up_file(tmp_path, "faster_rcnn_r152_50_1x_feature_mimic.yaml",
                                                         student_names(["neck.p2_cnv"] * 5))]))
    assert "neck.layer_blocks" in msg and "UP's names map: neck.c<l>_lateral, neck.p<l>_conv" in msg
