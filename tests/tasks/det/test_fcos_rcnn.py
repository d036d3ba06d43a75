"""UP's FCOS, C4 Faster R-CNN, R-FCN and Cascade R-CNN mapped onto torchvision parts
(up_trainer.tasks.det.fcos and .rcnn, tasks.up_nets.fcos_net and .rcnn_net): the pieces on hand-computed
cases, every UP kwarg honoured or refused in one line, and a few training steps on tiny digit
scenes lowering the loss of each model (resnet18, small channel counts, 64-pixel scenes)."""
import math
import os

import pytest
import torch
import yaml

from up_trainer.errors import ConfigError
from up_trainer.tasks.det.fcos import (FcosCriterion, FcosPostprocess, Scale, centerness_targets,
                                            fcos_points, fcos_targets)
from up_trainer.tasks.net import build_model
from up_trainer.tasks.up_nets import check_up_net
from conftest import UP_FIXTURES  # noqa: E402

UP_DET = os.path.join(UP_FIXTURES, "det")


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
    assert len(model.roi_head.scales) == 5 and isinstance(model.roi_head.cls_subnet[0].gn, torch.nn.GroupNorm)
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


# -- two-stage: pieces --------------------------------------------------------------------------
def test_sampled_rois_join_the_ground_truth_and_encode_by_stage_weights():
    from torchvision.models.detection._utils import BalancedPositiveNegativeSampler

    from up_trainer.tasks.det.box_ops import box_coder
    from up_trainer.tasks.det.rcnn import sample_rois
    from up_trainer.tasks.up_nets.det_parts import UPMatcher

    proposals = [torch.tensor([[0.0, 0, 10, 20],     # IoU 0.5 with the box: not above 0.5, not below: ignored
                               [0.0, 0, 10, 16],     # IoU 100 / 160 = 0.625: positive
                               [50.0, 50, 60, 60]])]  # IoU 0: negative
    targets = [{"boxes": torch.tensor([[0.0, 0, 10, 10]]), "labels": torch.tensor([4])}]
    coder = box_coder([0.1, 0.1, 0.2, 0.2])
    rois, labels, deltas, is_gt = sample_rois(proposals, targets, UPMatcher(0.5, 0.5, False),
                                              BalancedPositiveNegativeSampler(10, 0.5), coder)
    got = {tuple(r.tolist()): (int(lab), bool(g), d.tolist()) for r, lab, g, d in zip(rois[0], labels[0], is_gt[0],
                                                                                      deltas[0])}
    # the box itself joins as a positive (zero deltas); the 10 x 16 RoI: dy = (5 - 8) / 16 / 0.1,
    # dh = log(10 / 16) / 0.2
    assert set(got) == {(0.0, 0.0, 10.0, 10.0), (0.0, 0.0, 10.0, 16.0), (50.0, 50.0, 60.0, 60.0)}
    assert got[(0.0, 0.0, 10.0, 10.0)][:2] == (4, True) and got[(0.0, 0.0, 10.0, 10.0)][2] == [0.0] * 4
    lab, flag, d = got[(0.0, 0.0, 10.0, 16.0)]
    assert (lab, flag) == (4, False)
    assert d == pytest.approx([0.0, -3 / 16 / 0.1, 0.0, math.log(10 / 16) / 0.2], rel=1e-5)
    assert got[(50.0, 50.0, 60.0, 60.0)][:2] == (0, False)


def test_box_loss_picks_the_target_class_deltas():
    from up_trainer.tasks.det.rcnn import box_loss, pick_deltas

    logits = torch.zeros(2, 3)
    deltas = torch.arange(24.0).view(2, 12)  # 3 classes x 4
    labels = torch.tensor([2, 0])
    assert pick_deltas(deltas, labels).tolist() == [[8, 9, 10, 11], [12, 13, 14, 15]]
    wanted = torch.tensor([[8.0, 9, 10, 13], [0, 0, 0, 0]])
    cls, loc = box_loss(logits, deltas, labels, wanted, beta=1.0)
    assert float(cls) == pytest.approx(math.log(3))
    # only the positive counts: smooth-L1 of (0, 0, 0, -2) with beta 1 = 2 - 0.5 = 1.5, over 2 RoIs
    assert float(loc) == pytest.approx(1.5 / 2)


def small_c4():
    net = up_net("faster_rcnn/faster_rcnn_r50_C4_1x.yaml")
    net[0]["type"] = "resnet18"
    kw(net[1]).update(feat_planes=32, num_anchors=6)
    cfg = kw(net[2])["cfg"]
    cfg["anchor_generator"]["kwargs"]["anchor_scales"] = [1, 2]
    cfg["roi_supervisor"]["kwargs"]["sampler"]["kwargs"]["batch_size"] = 64
    for phase in ("train", "test"):
        cfg[phase]["roi_predictor"]["kwargs"].update(pre_nms_top_n=100, post_nms_top_n=20)
    # resnet18's stage 5 on each 7 x 7 RoI costs 0.4 GMAC: 8 RoIs per image keep the test fast
    kw(net[3])["cfg"]["bbox_supervisor"]["kwargs"]["sampler"]["kwargs"]["batch_size"] = 8
    kw(net[4]).update(backbone="resnet18", num_classes=11)
    return net


def test_c4_file_builds_ups_parts():
    model = build_model(up_net("faster_rcnn/faster_rcnn_r50_C4_1x.yaml"))
    names = [n for n, _ in model.named_children()]
    assert names == ["backbone", "roi_head", "bbox_head"]
    assert not hasattr(model.backbone, "layer4") and model.strides == [16]
    rpn, box = model.roi_head, model.bbox_head
    assert rpn.head.conv3x3.out_channels == 512 and rpn.beta == pytest.approx(1 / 9) and rpn.allowed_border == 0
    net = box.nets[0]
    assert net.layer4[0].conv2.stride == (1, 1) and net.fc_cls.out_features == 81 and net.fc_loc.out_features == 324
    assert box.beta == 1.0 and box.nms_thresh == 0.5 and box.detections_per_img == 100
    assert box.coders[0].weights == (10.0, 10.0, 5.0, 5.0)


def test_c4_trains_on_digit_scenes():
    torch.manual_seed(0)
    model = build_model(small_c4())
    batch = digit_batch()
    before, after = train_steps(model, batch, 8, 1e-3)
    assert after < 0.7 * before, (before, after)
    model.eval()
    with torch.no_grad():
        out = model(batch)
    assert {"detections", "loss_rpn_cls", "loss_rpn_loc", "loss_box_cls", "loss_box_loc"} <= set(out)
    assert all((d["labels"] >= 1).all() and (d["labels"] <= 10).all() for d in out["detections"])


@pytest.mark.parametrize("index, path, value, message", [
    (1, ["num_classes"], 3, "net[1].kwargs.num_classes: 3 is not supported"),
    (3, ["cfg", "roipooling", "method"], "psroialign", "net[3].kwargs.cfg.roipooling.method: expected roialignpool"),
    (3, ["cfg", "roipooling", "pool_size"], 9, "net[3].kwargs.cfg.roipooling.pool_size: 9: UP's res5 head takes"),
    (4, ["deformable"], True, "net[4].kwargs.deformable: True is not supported"),
    (4, ["backbone"], "resnet152", "net[4].kwargs.backbone: 'resnet152' is not mapped for BboxRes5"),
    (5, ["cfg", "loc_loss", "type"], "iou_loss", "net[5].kwargs.cfg.loc_loss.type: UP box localisation loss"),
])
def test_c4_kwargs_not_honoured_are_named_in_one_line(index, path, value, message):
    net = up_net("faster_rcnn/faster_rcnn_r50_C4_1x.yaml")
    d = kw(net[index])
    for key in path[:-1]:
        d = d[key]
    d[path[-1]] = value
    with pytest.raises(ConfigError) as err:
        check_up_net(net)
    assert message in str(err.value)


# -- R-FCN ---------------------------------------------------------------------------------------
def test_rfcn_pools_each_bin_from_its_own_channel_group():
    """Channel k of the score map holds the constant k: output class c, bin (i, j) reads channel
    c * ps^2 + i * ps + j, and the class logit is the mean over the bins."""
    from up_trainer.tasks.det.rcnn import RFCNHead

    ps, classes = 2, 3
    head = RFCNHead(4, 4, classes, pool_size=ps, stride=1, sampling_ratio=2)
    with torch.no_grad():
        head.new_conv.weight.zero_()
        head.rfcn_score.weight.zero_()
        head.rfcn_score.bias.copy_(torch.arange(ps * ps * classes, dtype=torch.float))
        head.rfcn_bbox.weight.zero_()
        head.rfcn_bbox.bias.copy_(torch.arange(ps * ps * 4 * classes, dtype=torch.float))
    feats = {"0": torch.rand(1, 4, 8, 8)}
    logits, deltas = head(feats, [torch.tensor([[0.0, 0, 8, 8], [2, 2, 6, 6]])], [(8, 8)])
    assert logits.shape == (2, classes) and deltas.shape == (2, 4 * classes)
    assert logits[0].tolist() == [1.5, 5.5, 9.5] and logits[1].tolist() == [1.5, 5.5, 9.5]
    assert deltas[0, :3].tolist() == [1.5, 5.5, 9.5]


def test_rfcn_is_position_sensitive():
    """A score channel lit only in the top-left quarter of the RoI feeds only bin (0, 0)."""
    from torchvision.ops import ps_roi_align

    x = torch.zeros(1, 4, 8, 8)
    x[0, 0, :4, :4] = 1.0  # bin (0, 0)'s channel, lit where bin (0, 0) is
    x[0, 3, :4, :4] = 1.0  # bin (1, 1)'s channel, lit in the wrong quarter
    out = ps_roi_align(x, [torch.tensor([[0.0, 0, 8, 8]])], 2, 1.0, 2)
    assert out[0, 0].tolist() == [[1.0, 0.0], [0.0, 0.0]]


def small_rfcn():
    net = up_net("rfcn/rfcn-R50-1x.yaml")
    net[0]["type"] = "resnet18"
    kw(net[0]).update(out_layers=[3], out_strides=[16])
    kw(net[1]).update(feat_planes=32, num_anchors=6)
    cfg = kw(net[2])["cfg"]
    cfg["anchor_generator"]["kwargs"]["anchor_scales"] = [1, 2]
    for phase in ("train", "test"):
        cfg[phase]["roi_predictor"]["kwargs"].update(pre_nms_top_n=100, post_nms_top_n=20)
    kw(net[3])["cfg"]["bbox_supervisor"]["kwargs"]["sampler"]["kwargs"]["batch_size"] = 32
    for entry in (net[3], net[4]):
        kw(entry)["cfg"]["roipooling"]["pool_size"] = 3
    kw(net[4]).update(feat_planes=32, num_classes=11)
    return net


def test_rfcn_file_builds_with_a_dilated_stage_5():
    model = build_model(up_net("rfcn/rfcn-R50-1x.yaml"))
    assert [n for n, _ in model.named_children()] == ["backbone", "roi_head", "bbox_head"]
    assert model.strides == [16] and model.backbone.layer4[0].conv2.dilation == (2, 2)
    assert model.backbone.layer4[0].conv2.stride == (1, 1) and model.backbone.layer4[1].conv2.dilation == (2, 2)
    head = model.bbox_head.nets[0]
    assert head.rfcn_score.out_channels == 49 * 81 and head.rfcn_bbox.out_channels == 49 * 4 * 81
    assert model.bbox_head.nms_thresh == 0.3


def test_rfcn_trains_on_digit_scenes():
    torch.manual_seed(0)
    model = build_model(small_rfcn())
    batch = digit_batch()
    before, after = train_steps(model, batch, 10, 1e-3)
    assert after < 0.7 * before, (before, after)
    model.eval()
    with torch.no_grad():
        out = model(batch)
    assert "detections" in out and all((d["labels"] >= 1).all() for d in out["detections"])


# -- Cascade R-CNN -------------------------------------------------------------------------------
class FixedNet(torch.nn.Module):
    """A box net giving the same logits and deltas for every RoI, recording the RoIs it saw."""

    def __init__(self, logits, deltas):
        super().__init__()
        self.logits, self.deltas, self.seen = torch.tensor(logits), torch.tensor(deltas), None

    def forward(self, features, rois, sizes):
        self.seen = [r.clone() for r in rois]
        n = sum(len(r) for r in rois)
        return self.logits.expand(n, -1).clone(), self.deltas.expand(n, -1).clone()


def fixed_cascade(nets, thresholds, stds, ensemble=True):
    from up_trainer.tasks.det.box_ops import box_coder
    from up_trainer.tasks.det.rcnn import BoxStages
    from up_trainer.tasks.up_nets.det_parts import UPMatcher

    return BoxStages(nets, [UPMatcher(t, t, False) for t in thresholds], [box_coder(s) for s in stds], 64, 0.5,
                     beta=1.0, weights=[1.0, 0.5], ensemble=ensemble, score_thresh=0.0, nms_thresh=0.5)


def test_cascade_stages_match_at_rising_iou_and_refine_without_the_ground_truth():
    # the RoI [0, 0, 10, 12] has IoU 100 / 120 = 0.83 with the box: positive at 0.5; stage 1
    # moves every RoI right by dx = 0.1 x w (deltas (1, 0, 0, 0) / weight 10): [1, 0, 11, 12]
    # (IoU 90 / 130 = 0.69): below stage 2's 0.7, a negative there
    nets = [FixedNet([0.0, 0.0], [1.0, 0, 0, 0]), FixedNet([0.0, 0.0], [0.0, 0, 0, 0])]
    stages = fixed_cascade(nets, [0.5, 0.7], [[0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1]])
    targets = [{"boxes": torch.tensor([[0.0, 0, 10, 10]]), "labels": torch.tensor([1])}]
    losses = stages.losses({}, [torch.tensor([[0.0, 0, 10, 12]])], [(32, 32)], targets)
    assert set(losses) == {"loss_box_cls_s1", "loss_box_loc_s1", "loss_box_cls_s2", "loss_box_loc_s2"}
    assert sorted(map(tuple, nets[0].seen[0].tolist())) == [(0, 0, 10, 10), (0, 0, 10, 12)]
    # stage 2 sees the moved RoI and the ground truth again (joined anew), not the moved ground truth
    assert sorted(map(tuple, nets[1].seen[0].tolist())) == [(0, 0, 10, 10), (1, 0, 11, 12)]
    # stage 2: 2 RoIs, softmax over 2 equal logits: CE log 2, weighted by 0.5; the positive is the
    # ground truth itself (zero deltas wanted, zero predicted): no box loss
    assert float(losses["loss_box_cls_s2"]) == pytest.approx(0.5 * math.log(2))
    assert float(losses["loss_box_loc_s2"]) == 0.0


def test_cascade_scores_average_the_stages_and_boxes_come_from_the_last():
    nets = [FixedNet([0.0, 2.0, 0.0], [1.0, 0, 0, 0]), FixedNet([0.0, 0.0, 3.0], [0.0, 0, 0, 0])]
    stds = [[0.1, 0.1, 0.2, 0.2], [0.1, 0.1, 0.2, 0.2]]
    rois = [torch.tensor([[0.0, 0, 10, 10]])]
    det = fixed_cascade(nets, [0.5, 0.6], stds).detect({}, rois, [(32, 32)])[0]
    p1, p2 = torch.softmax(torch.tensor([0.0, 2, 0]), 0), torch.softmax(torch.tensor([0.0, 0, 3]), 0)
    mean = (p1 + p2) / 2
    got = dict(zip(det["labels"].tolist(), det["scores"].tolist()))
    assert got == pytest.approx({1: float(mean[1]), 2: float(mean[2])})
    # stage 2 saw the RoI moved by stage 1 (best class 1, agnostic deltas): x + 0.1 x 10 = 1
    assert nets[1].seen[0].tolist() == [[1.0, 0, 11, 10]]
    assert det["boxes"][0].tolist() == [1.0, 0, 11, 10]  # stage 2 predicts no move
    det = fixed_cascade(nets, [0.5, 0.6], stds, ensemble=False).detect({}, rois, [(32, 32)])[0]
    assert dict(zip(det["labels"].tolist(), det["scores"].tolist())) == pytest.approx(
        {1: float(p2[1]), 2: float(p2[2])})


def small_cascade():
    net = up_net("cascade_rcnn/cascade-rcnn-R50-FPN-1x.yaml")
    net[0]["type"] = "resnet18"
    kw(net[0])["normalize"] = {"type": "solo_bn"}
    kw(net[1]).update(outplanes=32)
    kw(net[2]).update(feat_planes=32)
    cfg = kw(net[3])["cfg"]
    cfg["anchor_generator"]["kwargs"]["anchor_scales"] = [4]
    for phase in ("train", "test"):
        cfg[phase]["roi_predictor"]["kwargs"].update(pre_nms_top_n=100, post_nms_top_n=50)
        cfg[phase]["roi_predictor"]["kwargs"]["merger"]["kwargs"]["top_n"] = 50
    kw(net[4]).update(feat_planes=64, num_classes=11)
    kw(net[4])["cfg"]["cascade_supervisor"]["kwargs"]["sampler"]["kwargs"]["batch_size"] = 32
    return net


def test_cascade_file_builds_three_stages():
    model = build_model(up_net("cascade_rcnn/cascade-rcnn-R50-FPN-1x.yaml"))
    assert [n for n, _ in model.named_children()] == ["backbone", "neck", "roi_head", "cascade_head"]
    head = model.cascade_head
    assert len(head.nets) == 3 and head.weights == [1.0, 0.5, 0.25] and head.ensemble
    assert [m.pos for m in head.matchers] == [0.5, 0.6, 0.7]
    assert head.coders[2].weights == pytest.approx((1 / 0.033, 1 / 0.033, 1 / 0.067, 1 / 0.067))
    assert head.nets[0].fc_rcnn_loc.out_features == 4  # share_location: class-agnostic boxes


def test_cascade_trains_on_digit_scenes():
    torch.manual_seed(0)
    model = build_model(small_cascade())
    batch = digit_batch()
    before, after = train_steps(model, batch, 10, 1e-3)
    assert after < 0.7 * before, (before, after)
    model.eval()
    with torch.no_grad():
        out = model(batch)
    assert {"loss_box_cls_s3", "detections"} <= set(out)


def test_a_key_repeated_with_the_same_value_loads():
    """UP's cascade file repeats bbox_score_thresh: 0.0 (a repeat with another value: tests/up_compat/
    test_up_yaml_repeats.py)."""
    from up_trainer.config.loader import parse_yaml

    assert parse_yaml("a: {x: 0.0, y: 1, x: 0.0}\n") == {"a": {"x": 0.0, "y": 1}}


# -- UP's parameter names ------------------------------------------------------------------------
def test_up_named_weights_translate_to_ours():
    """FCOS's head keeps UP's names (conv / gn / relu blocks, scales); the box heads' UP names
    (bbox_head.layer4, fc6_list.{stage}, ...) are rewritten onto the stages."""
    fcos = build_model(small_fcos()).state_dict()
    assert {"roi_head.cls_subnet.0.conv.weight", "roi_head.cls_subnet.0.gn.weight", "roi_head.scales.4.scale",
            "roi_head.centerness.weight"} <= set(fcos)
    for builder, up_of in ((small_c4, lambda k: k.replace("bbox_head.nets.0.", "bbox_head.")),
                           (small_rfcn, lambda k: k.replace("bbox_head.nets.0.", "bbox_head.")),
                           (small_cascade, lambda k: __import__("re").sub(
                               r"cascade_head\.nets\.(\d+)\.(\w+)\.", r"cascade_head.\2_list.\1.", k))):
        model = build_model(builder())
        ours = model.state_dict()
        up_named = {up_of(k): v for k, v in ours.items()}
        assert up_named.keys() != ours.keys()
        assert model.translate_up_weights(up_named).keys() == ours.keys()


def test_rpn_losses_are_divided_as_ups_post_process_divides_them():
    """1 positive and 3 negatives sampled, all logits 0: BCE sum 4 log 2; the positive's deltas off
    by (2, 0, 0, 0) with beta 1/9: 2 - 1/18. rpn_post (C4) divides by the 4 sampled anchors,
    retina_post (UP's R-FCN file) by the 1 positive."""
    labels = [torch.tensor([1.0, 0, 0, 0])]
    wanted = [torch.zeros(4, 4)]
    deltas = torch.zeros(4, 4)
    deltas[0, 0] = 2.0
    for builder, count in ((small_c4, 4), (small_rfcn, 1)):
        rpn = build_model(builder()).roi_head
        rpn.fg_bg_sampler.batch_size_per_image = 4
        cls, loc = rpn.compute_loss(torch.zeros(4, 1), deltas, labels, wanted)
        assert float(cls) == pytest.approx(4 * math.log(2) / count)
        assert float(loc) == pytest.approx((2 - 0.5 / 9) / count)


@pytest.mark.parametrize("builder", [small_fcos, small_rfcn, small_cascade])
def test_an_image_without_boxes_trains_and_bfloat16_autocast_keeps_float_losses(builder):
    torch.manual_seed(0)
    model = build_model(builder())
    batch = digit_batch()
    batch["target"][1] = {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64)}
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = model(batch)
    assert all(torch.isfinite(v) and v.dtype == torch.float32 for v in losses.values()), losses
    sum(losses.values()).backward()


def test_no_proposal_gives_no_detection_and_boxes_moved_out_of_the_image_are_dropped():
    nets = [FixedNet([0.0, 1.0], [0.0, 0, 0, 0]), FixedNet([0.0, 1.0], [0.0, 0, 0, 0])]
    stds = [[0.1, 0.1, 0.2, 0.2]] * 2
    det = fixed_cascade(nets, [0.5, 0.6], stds).detect({}, [torch.zeros(0, 4)], [(32, 32)])[0]
    assert det["boxes"].shape == (0, 4) and det["labels"].numel() == 0
    # stage 1 moves every RoI 10 widths right (dx 100 / weight 10): the 10 x 10 box at x 0 leaves
    # the 32-pixel image and is clipped to nothing; stage 2 trains on the ground truth alone
    nets = [FixedNet([0.0, 0.0], [100.0, 0, 0, 0]), FixedNet([0.0, 0.0], [0.0, 0, 0, 0])]
    targets = [{"boxes": torch.tensor([[0.0, 0, 10, 10]]), "labels": torch.tensor([1])}]
    losses = fixed_cascade(nets, [0.5, 0.6], stds).losses({}, [torch.tensor([[0.0, 0, 10, 10]])], [(32, 32)],
                                                           targets)
    assert nets[1].seen[0].tolist() == [[0.0, 0, 10, 10]]
    assert all(torch.isfinite(v) for v in losses.values())
