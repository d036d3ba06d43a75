"""UP's FCOS, C4 Faster R-CNN, R-FCN and Cascade R-CNN mapped onto torchvision parts
(up_trainer.tasks.det.rcnn_plus, tasks.up_nets.rcnn_plus_net): the pieces on hand-computed
cases, every UP kwarg honoured or refused in one line, and a few training steps on tiny digit
scenes lowering the loss of each model (resnet18, small channel counts, 64-pixel scenes)."""
import copy
import math
import os

import pytest
import torch
import yaml

from up_trainer.errors import ConfigError
from up_trainer.tasks.det.rcnn_plus import (FcosCriterion, FcosPostprocess, Scale, centerness_targets,
                                            fcos_points, fcos_targets)
from up_trainer.tasks.net import build_model
from up_trainer.tasks.up_nets import check_up_net

UP_DET = os.path.join(os.path.dirname(__file__), "data", "up", "det")


def up_net(rel):
    with open(os.path.join(UP_DET, rel)) as f:
        return yaml.safe_load(f)["net"]


def digit_batch(n=2, size=64):
    from up_trainer.tasks.det.digits_det import DigitsDetection

    ds = DigitsDetection(num_images=n, canvas_size=size, digits_per_image=[1, 2], scale_range=[16, 28], seed=3)
    items = [ds[i] for i in range(n)]
    return {"image": [it["image"] for it in items],
            "target": [{"boxes": it["target"]["boxes"], "labels": it["target"]["labels"]} for it in items]}


def train_steps(model, batch, steps, lr):
    """(total loss before, after ``steps`` Adam steps) on one fixed batch."""
    torch.manual_seed(0)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    first = None
    for _ in range(steps):
        loss = sum(model(batch).values())
        first = float(loss.detach()) if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        last = float(sum(model(batch).values()))
    return first, last


def kw(entry):
    return entry.setdefault("kwargs", {})


# -- FCOS: pieces -------------------------------------------------------------------------------
def test_scale_multiplies_and_learns():
    s = Scale(2.0)
    x = torch.tensor([1.0, -3.0])
    y = s(x)
    assert torch.equal(y, torch.tensor([2.0, -6.0]))
    y.sum().backward()
    assert float(s.scale.grad) == pytest.approx(-2.0)  # d(sum(s * x))/ds = sum(x)


def test_points_are_cell_centres():
    p8, p16 = fcos_points([(2, 3), (1, 2)], [8, 16])
    assert p8.tolist() == [[4, 4], [12, 4], [20, 4], [4, 12], [12, 12], [20, 12]]
    assert p16.tolist() == [[8, 8], [24, 8]]


def test_centerness_target_by_hand():
    d = torch.tensor([[2.0, 1.0, 8.0, 4.0], [5.0, 5.0, 5.0, 5.0]])
    # sqrt(2/8 * 1/4) = 0.25; a centred point: 1
    assert centerness_targets(d).tolist() == pytest.approx([0.25, 1.0])


def test_fcos_targets_by_hand():
    points = [torch.tensor([[4.0, 4.0], [12.0, 4.0], [20.0, 20.0]]), torch.tensor([[8.0, 8.0]])]
    strides, ranges = [8, 16], [[-1, 10], [10, 1000]]
    boxes = torch.tensor([[0.0, 0.0, 16.0, 10.0],  # small: level 0
                          [0.0, 0.0, 30.0, 30.0]])  # large: reaches 22+ from any point -> level 1
    labels = torch.tensor([3, 5])
    got_labels, dist = fcos_targets(points, strides, ranges, boxes, labels, pos_radius=1.5, center_sample=False)
    # (4, 4): inside both; small box max distance 12 > 10 -> out of level 0's range; big box 26 also
    # out of range -> background. (12, 4): small box distances (12, 4, 4, 6), max 12 -> out; background.
    # (20, 20): only inside the big box, max 20... out of [-1, 10] -> background.
    # (8, 8) on level 1: small box (8, 8, 8, 2) max 8 < 10 -> no; big box (8, 8, 22, 22) max 22 -> label 5.
    assert got_labels.tolist() == [0, 0, 0, 5]
    assert dist[3].tolist() == [8, 8, 22, 22]
    # with level 0 accepting up to 12, (4, 4) and (12, 4) go to the small box (the smaller area wins)
    got_labels, dist = fcos_targets(points, strides, [[-1, 12], [12, 1000]], boxes, labels, center_sample=False)
    assert got_labels.tolist() == [3, 3, 0, 5]
    assert dist[1].tolist() == [12, 4, 4, 6]


def test_center_sampling_keeps_points_near_the_centre():
    points = [torch.tensor([[2.0, 2.0], [16.0, 16.0], [26.0, 16.0]])]
    box = torch.tensor([[0.0, 0.0, 32.0, 32.0]])
    # centre (16, 16), radius 1.5 x stride 4 = 6: only points within 6 of the centre (strictly)
    labels, _ = fcos_targets(points, [4], [[-1, 1000]], box, torch.tensor([1]), pos_radius=1.5, center_sample=True)
    assert labels.tolist() == [0, 1, 0]
    labels, _ = fcos_targets(points, [4], [[-1, 1000]], box, torch.tensor([1]), pos_radius=3.0, center_sample=True)
    assert labels.tolist() == [0, 1, 1]


def test_fcos_loss_weights_giou_by_centerness():
    """One positive point at the centre of its box, predicted exactly: GIoU loss 0, centerness
    target 1; a second, off-centre positive predicted half-size: its GIoU loss counts with its
    centerness weight."""
    crit = FcosCriterion([8], [[-1, 1000]], center_sample=False, norm_on_bbox=False)
    points = [torch.tensor([[8.0, 8.0], [4.0, 8.0]])]
    targets = [{"boxes": torch.tensor([[0.0, 0.0, 16.0, 16.0]]), "labels": torch.tensor([1])}]
    want = torch.tensor([[8.0, 8, 8, 8], [4, 8, 12, 8]])
    pred = want.clone()
    pred[1] = want[1] / 2
    cls = torch.full((1, 1, 1, 2), -20.0)
    cls[0, 0, 0] = 20.0
    outputs = [(cls, pred.t().reshape(1, 4, 1, 2), torch.zeros(1, 1, 1, 2))]
    losses = crit(outputs, points, targets)
    c = math.sqrt(4 / 12)  # centerness of (4, 8, 12, 8)
    iou = (8 * 8) / (16 * 16)  # half-size box inside the full one: IoU = 1/4, GIoU = IoU (enclosing = union)
    assert float(losses["loss_loc"]) == pytest.approx(c * (1 - iou) / (1 + c), rel=1e-5)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(torch.zeros(2), torch.tensor([1.0, c]))
    assert float(losses["loss_centerness"]) == pytest.approx(float(bce), rel=1e-5)
    assert float(losses["loss_cls"]) < 1e-6


def test_fcos_score_is_class_times_centerness_and_decodes_by_stride():
    post = FcosPostprocess([8], score_thresh=0.0, pre_nms_top_n=10, nms_thresh=0.5, detections_per_img=5)
    points = [torch.tensor([[8.0, 8.0]])]
    cls = torch.tensor([0.0, 2.0]).reshape(1, 2, 1, 1)
    dist = torch.tensor([1.0, 0.5, 1.0, 0.5]).reshape(1, 4, 1, 1)
    ctr = torch.tensor([1.0]).reshape(1, 1, 1, 1)
    det = post([(cls, dist, ctr)], points, [(32, 32)])[0]
    sig = torch.sigmoid
    assert det["labels"].tolist() == [2, 1]
    assert det["scores"].tolist() == pytest.approx([float(sig(torch.tensor(2.0)) * sig(torch.tensor(1.0))),
                                                    float(0.5 * sig(torch.tensor(1.0)))])
    assert det["boxes"][0].tolist() == [0.0, 4.0, 16.0, 12.0]  # distances x stride 8 around (8, 8)


# -- FCOS: the UP file --------------------------------------------------------------------------
def small_fcos():
    net = up_net("fcos/fcos-R50-1x.yaml")
    net[0]["type"] = "resnet18"
    kw(net[0])["normalize"] = {"type": "solo_bn"}
    kw(net[1]).update(outplanes=32)
    kw(net[2]).update(num_classes=11, feat_planes=32, num_conv=2, normalize={"type": "gn", "kwargs": {"num_groups": 8}},
                      loc_ranges=[[-1, 16], [16, 32], [32, 64], [64, 128], [128, 100000]])
    kw(net[3]).update(num_classes=11, loc_ranges=kw(net[2])["loc_ranges"])
    kw(net[3])["cfg"]["cls_loss"]["kwargs"]["num_classes"] = 11
    return net


def test_fcos_file_builds_with_ups_parts():
    model = build_model(up_net("fcos/fcos-R50-1x.yaml"))
    assert [n for n, _ in model.named_children()][:3] == ["backbone", "neck", "roi_head"]
    assert model.num_classes == 80 and model.strides == [8, 16, 32, 64, 128]
    assert len(model.roi_head.scales) == 5 and isinstance(model.roi_head.cls_subnet[0][1], torch.nn.GroupNorm)
    assert model.criterion.norm_on_bbox and model.criterion.center_sample and model.criterion.pos_radius == 1.5
    assert model.postprocess.nms_thresh == 0.65 and model.postprocess.detections_per_img == 100


def test_fcos_trains_on_digit_scenes():
    torch.manual_seed(0)
    model = build_model(small_fcos())
    batch = digit_batch()
    before, after = train_steps(model, batch, 12, 1e-3)
    assert after < 0.7 * before, (before, after)
    model.eval()
    with torch.no_grad():
        out = model(batch)
    assert {"detections", "loss_cls", "loss_loc", "loss_centerness"} <= set(out)
    assert all(len(d["boxes"]) <= 100 and (d["labels"] >= 1).all() and (d["labels"] <= 10).all()
               for d in out["detections"])


@pytest.mark.parametrize("index, path, value, message", [
    (2, ["dense_points"], 5, "net[2].kwargs.dense_points: 5 is not supported"),
    (2, ["loc_ranges"], [[-1, 64]], "net[2].kwargs.loc_ranges: 1 ranges for 5 pyramid levels"),
    (2, ["has_mask"], True, "net[2].kwargs.has_mask: True is not supported"),
    (3, ["cfg", "loc_loss", "kwargs", "loss_type"], "iou", "net[3].kwargs.cfg.loc_loss.kwargs.loss_type: 'iou'"),
    (3, ["cfg", "fcos_predictor", "kwargs", "norm_on_bbox"], False,
     "net[3].kwargs.cfg.fcos_predictor.kwargs.norm_on_bbox: False is not supported"),
    (3, ["cfg", "fcos_supervisor", "kwargs", "matcher", "kwargs", "radius"], 2,
     "net[3].kwargs.cfg.fcos_supervisor.kwargs.matcher.kwargs.radius: UP kwarg not supported"),
])
def test_fcos_kwargs_not_honoured_are_named_in_one_line(index, path, value, message):
    net = up_net("fcos/fcos-R50-1x.yaml")
    d = kw(net[index])
    for key in path[:-1]:
        d = d[key]
    d[path[-1]] = value
    with pytest.raises(ConfigError) as err:
        check_up_net(net)
    assert message in str(err.value)
