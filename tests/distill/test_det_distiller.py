"""The detection mimic types hooked onto a real (small) UP Faster R-CNN student: one training
forward returns each slot's loss, the student's adapt parts and FPN get gradients from them,
UP's module names resolve, and a teacher list that stops at the RPN loads only its parts."""
import copy
import os

import pytest
import torch
import yaml

from conftest import UP_FIXTURES
from up_trainer.distill import _add_adapters
from up_trainer.distill.adapt_parts import build_adapt_parts
from up_trainer.distill.distiller import Distiller
from up_trainer.distill.spec import read_spec
from up_trainer.distill.teacher import load_teacher_weights
from up_trainer.errors import CheckpointError
from up_trainer.tasks.net import build_model

FRS_FILE = os.path.join(UP_FIXTURES, "distiller", "det", "faster_rcnn", "faster_rcnn_r152_50_1x_frs.yaml")
FPN = ["neck.p2_conv", "neck.p3_conv", "neck.p4_conv", "neck.p5_conv", "neck.p6_pool"]
ADAPT = [f"neck_adapt.conv.{i}.0" for i in range(5)]


def net_list():
    """UP's Faster R-CNN student list of the FRS file on a ResNet-18, ADAP left out."""
    with open(FRS_FILE) as f:
        net = [e for e in yaml.safe_load(f)["net"] if e["type"] != "ADAP"]
    net[0]["type"] = "resnet18"
    net[0]["kwargs"]["normalize"] = {"type": "solo_bn"}
    net[5]["kwargs"].update(feat_planes=64, num_classes=11)  # a small box head: 10 classes
    return net


def batch():
    g = torch.Generator().manual_seed(0)
    images = [torch.rand(3, 64, 64, generator=g) for _ in range(2)]
    targets = [{"boxes": torch.tensor([[8.0, 8.0, 30.0, 28.0]]), "labels": torch.tensor([3])},
               {"boxes": torch.tensor([[20.0, 10.0, 44.0, 40.0], [2.0, 40.0, 20.0, 60.0]]),
                "labels": torch.tensor([1, 7])}]
    return {"image": images, "target": targets}


JOBS = {
    "FRS": ({"type": "FRS", "student": ADAPT, "teachers": {"t": FPN}}, ["neck_loss", "pred_loss"]),
    "SampleFeature": ({"type": "SampleFeature", "student": FPN, "teachers": {"t": FPN}}, ["feature_loss"]),
    "DeFeat": ({"type": "DeFeat", "student": ["backbone.layer4"] + FPN, "teachers": {"t": ["backbone.layer4"] + FPN}},
               ["backbone_loss", "neck_fg_loss", "neck_bg_loss"]),
}


@pytest.mark.parametrize("kind", sorted(JOBS))
def test_a_training_forward_returns_each_slots_loss_and_trains_the_adapt_part(kind):
    job, slots = JOBS[kind]
    torch.manual_seed(0)
    student, teacher = build_model(net_list()), build_model(net_list())
    teacher.eval()
    spec = read_spec({"teachers": [{"name": "t", "net": net_list()}], "mimic": [dict(job, name="j")],
                      "adapt": [{"name": "neck_adapt", "on": "neck", "levels": [0, 1, 2, 3, 4], "outplanes": 256}]})
    _add_adapters(student, build_adapt_parts(spec, student))
    distiller = Distiller(spec, student, {"t": teacher})
    student.train()
    out = student(batch())
    losses = {k: v for k, v in out.items() if k.startswith("mimic.")}
    assert sorted(losses) == sorted(f"mimic.j.t.{slot}" for slot in slots)
    assert all(torch.isfinite(v) and v > 0 for v in losses.values()), losses
    sum(losses.values()).backward()
    grads = {name: p.grad for name, p in student.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    trained = "distill_adapters.neck_adapt.conv.0.0.weight" if kind != "SampleFeature" else "neck.layer_blocks.0.0.weight"
    assert trained in grads
    assert not any(p.grad is not None for p in teacher.parameters())
    student.eval()
    with torch.no_grad():
        assert not any(k.startswith("mimic.") for k in student(batch()))  # evaluation passes untouched
    distiller.remove()


def test_ups_fpn_names_resolve_to_torchvisions_modules():
    from up_trainer.distill.modules import find_module

    student = build_model(net_list())
    assert find_module(student, "neck.p2_conv", "x", "student") is student.neck.layer_blocks[0][0]
    assert find_module(student, "neck.c3_lateral", "x", "student") is student.neck.inner_blocks[1][0]
    assert find_module(student, "neck.p6_pool", "x", "student") is student.neck.extra_blocks.pools[0]
    assert find_module(student, "backbone.layer0.0", "x", "student") is student.backbone.conv1


def test_a_teacher_that_stops_at_the_rpn_needs_only_its_parts_in_the_file(tmp_path):
    spec = read_spec({"teachers": [{"name": "t", "net": net_list(), "parts": ["backbone", "neck", "roi_head"]}],
                      "mimic": [{"student": FPN, "teachers": {"t": FPN}}]}).teachers[0]
    teacher = build_model(net_list())
    state = {k: v for k, v in teacher.state_dict().items() if k.split(".")[0] in spec.parts}
    torch.save(state, tmp_path / "rpn_only.pth")
    fresh = build_model(net_list())
    load_teacher_weights(fresh, spec, str(tmp_path / "rpn_only.pth"))
    assert torch.equal(fresh.neck.layer_blocks[0][0].weight, teacher.neck.layer_blocks[0][0].weight)
    short = {k: v for k, v in state.items() if not k.startswith("neck.layer_blocks.0")}
    torch.save(short, tmp_path / "short.pth")
    with pytest.raises(CheckpointError, match=r"^distill.teachers\[0\].weight: .* does not fit teacher 't'"):
        load_teacher_weights(build_model(net_list()), spec, str(tmp_path / "short.pth"))
    whole = copy.copy(spec)
    whole.parts = None  # without parts every tensor must come from the file
    with pytest.raises(CheckpointError):
        load_teacher_weights(build_model(net_list()), whole, str(tmp_path / "rpn_only.pth"))
