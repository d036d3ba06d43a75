"""The detection mimic types (SampleFeature, FRS, DeFeat) and their losses on small tensors,
each against a hand computation."""
import math
from types import SimpleNamespace

import pytest
import torch

from up_trainer.distill.kinds import OPTIONS
from up_trainer.distill.losses import BCELoss, L2Loss
from up_trainer.distill.mimics import Seen, box_levels, defeat, frs, gt_masks, roi_features, sample_feature


def job(kind, **options):
    return SimpleNamespace(type=kind, options={**OPTIONS[kind], **options}, path="distill.mimic[0]")


def test_l2_with_a_mask_divides_by_the_masks_sum():
    s = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    t = torch.zeros(1, 1, 2, 2)
    mask = torch.tensor([[[[1.0, 0.0], [0.5, 0.0]]]])
    # (1 * 1 + 0.5 * 9) / 1.5
    assert L2Loss()([s], [t], masks=[mask]).item() == pytest.approx(5.5 / 1.5)
    assert L2Loss(batch_mean=True)([s], [t], masks=[mask]).item() == pytest.approx(5.5)
    assert L2Loss()([s], [t], masks=[torch.zeros_like(mask)]).item() == 0.0
    assert L2Loss()([s], [t]).item() == pytest.approx(30 / 4)  # no mask: the element mean


def test_bce_weighs_each_score_by_the_mask():
    s = torch.tensor([[[[0.0, 2.0]]]])
    t = torch.tensor([[[[0.0, -2.0]]]])
    mask = torch.tensor([[[[1.0, 3.0]]]])
    p = 1 / (1 + math.exp(2.0))  # the teacher's probability at the second score
    second = -(p * math.log(1 / (1 + math.exp(-2.0))) + (1 - p) * math.log(1 - 1 / (1 + math.exp(-2.0))))
    want = (1.0 * math.log(2.0) + 3.0 * second) / 4.0
    assert BCELoss()([s], [t], masks=[mask]).item() == pytest.approx(want, rel=1e-5)
    # a temperature divides both: at T = 2 the second score is sigmoid(1) against sigmoid(-1)
    q = 1 / (1 + math.exp(1.0))
    second_t = -(q * math.log(1 / (1 + math.exp(-1.0))) + (1 - q) * math.log(1 - 1 / (1 + math.exp(-1.0))))
    assert BCELoss(T=2.0)([s], [t], masks=[mask]).item() == pytest.approx((math.log(2.0) + 3 * second_t) / 4,
                                                                        rel=1e-5)


def test_box_levels_follow_ups_rule():
    boxes = torch.tensor([[0, 0, 20, 20], [0, 0, 56, 56], [0, 0, 120, 120], [0, 0, 500, 500.0]])
    # floor(log2(side / 56)): -2 -> 0, 0, 1, 3 -> clamped to the last level 2
    assert box_levels(boxes, [0, 1, 2], 56).tolist() == [0, 0, 1, 2]


def test_gt_masks_mark_each_box_on_its_level():
    boxes = [torch.tensor([[4.0, 8.0, 20.0, 16.0], [0.0, 0.0, 120.0, 120.0]]), torch.zeros(0, 4)]
    shapes = [(2, 3, 8, 8), (2, 3, 4, 4)]
    masks = gt_masks(boxes, [0, 1], [4, 8], 56, shapes)
    want0 = torch.zeros(2, 8, 8)
    want0[0, 2:4, 1:5] = 1  # the small box at stride 4: x 1..5, y 2..4
    want1 = torch.zeros(2, 4, 4)
    want1[0, 0:4, 0:4] = 1  # the large box on level 1, clipped to the map
    assert torch.equal(masks[0], want0) and torch.equal(masks[1], want1)
    thin = gt_masks([torch.tensor([[9.0, 9.0, 10.0, 30.0]])], [0], [4], 56, [(1, 1, 8, 8)])[0]
    assert thin.sum() == 1 and thin[0, 2, 2] == 1  # thinner than a cell: the cell it starts in


def test_roi_features_pool_each_roi_from_its_level():
    maps = [torch.full((1, 2, 32, 32), 1.0), torch.full((1, 2, 16, 16), 5.0)]  # a 128-pixel image
    rois = [torch.tensor([[0.0, 0.0, 20.0, 20.0], [0.0, 0.0, 120.0, 120.0]])]  # sides 20 and 120: levels 0, 1
    pooled = roi_features(rois, maps, [0, 1], [4, 8], 56, 3)
    assert pooled.shape == (2, 2, 3, 3)
    assert torch.allclose(pooled[0], torch.ones(2, 3, 3)) and torch.allclose(pooled[1], torch.full((2, 3, 3), 5.0))


def test_sample_feature_compares_pooled_maps_on_the_teachers_proposals():
    feats_s = [torch.full((1, 2, 16, 16), 3.0, requires_grad=True), torch.full((1, 2, 8, 8), 3.0)]
    feats_t = [torch.full((1, 2, 16, 16), 1.0), torch.full((1, 2, 8, 8), 1.0)]
    seen = Seen(student={"proposals": [torch.zeros(0, 4)]},
                teacher={"proposals": [torch.tensor([[0.0, 0.0, 8.0, 8.0]])]})
    losses = {"feature_loss": L2Loss()}
    out = sample_feature(job("SampleFeature", rcnn_fpn_levels=[0, 1], rcnn_fpn_strides=[4, 8]), losses,
                         feats_s, feats_t, seen)
    assert out["feature_loss"].item() == pytest.approx((3.0 - 1.0) ** 2 / 2)  # UP halves it
    out["feature_loss"].backward()
    assert feats_s[0].grad is not None and feats_s[0].grad.abs().sum() > 0
    # teacher_proposal: false uses the student's proposals, here none: a zero loss
    out = sample_feature(job("SampleFeature", teacher_proposal=False, rcnn_fpn_levels=[0, 1], rcnn_fpn_strides=[4, 8]),
                         losses, feats_s, feats_t, seen)
    assert out["feature_loss"].item() == 0.0


def test_frs_weighs_by_the_teachers_max_objectness():
    feats_s = [torch.tensor([[[[2.0, 0.0]]]])]
    feats_t = [torch.tensor([[[[0.0, 0.0]]]])]
    scores_t = [torch.tensor([[[[0.0, -10.0]], [[1.0, -20.0]]]])]  # 2 anchors x 1 x 2
    scores_s = [torch.zeros(1, 2, 1, 2)]
    seen = Seen(student={"scores": scores_s}, teacher={"scores": scores_t})
    out = frs(job("FRS"), {"neck_loss": L2Loss(), "pred_loss": BCELoss()}, feats_s, feats_t, seen)
    m0, m1 = 1 / (1 + math.exp(-1.0)), 1 / (1 + math.exp(10.0))  # max over anchors after a sigmoid
    assert out["neck_loss"].item() == pytest.approx(4.0 * m0 / (m0 + m1), rel=1e-5)
    want = BCELoss()(scores_s, scores_t, masks=[torch.tensor([[[[m0, m1]]]])])
    assert out["pred_loss"].item() == pytest.approx(want.item(), rel=1e-6)


def test_frs_refuses_scores_that_do_not_match_the_maps():
    from up_trainer.errors import ConfigError

    seen = Seen(student={"scores": [torch.zeros(1, 3, 4, 4)]}, teacher={"scores": [torch.zeros(1, 3, 4, 4)]})
    with pytest.raises(ConfigError, match="FRS weighs each named map"):
        frs(job("FRS"), {"neck_loss": L2Loss(), "pred_loss": BCELoss()}, [torch.zeros(1, 2, 8, 8)],
            [torch.zeros(1, 2, 8, 8)], seen)


def test_defeat_splits_the_neck_loss_inside_and_outside_the_boxes():
    bb_s, bb_t = torch.full((1, 1, 2, 2), 1.0), torch.zeros(1, 1, 2, 2)
    neck_s, neck_t = torch.full((1, 2, 4, 4), 2.0), torch.zeros(1, 2, 4, 4)
    neck_s[0, :, 0, 0] = 4.0  # inside the box: a larger difference
    seen = Seen(boxes=[torch.tensor([[0.0, 0.0, 4.0, 4.0]])], adapt={"adapt_neck_features": [neck_s]})
    losses = {k: L2Loss() for k in ("backbone_loss", "neck_fg_loss", "neck_bg_loss")}
    out = defeat(job("DeFeat", neck_feature_nums=1, rpn_fpn_levels=[0], rpn_fpn_strides=[4]), losses,
                 [bb_s, torch.zeros(1, 2, 4, 4)], [bb_t, neck_t], seen)
    assert out["backbone_loss"].item() == pytest.approx(1.0 / 1 / 2)
    # the box covers cell (0, 0) on both channels: fg mean 16, bg mean 4; each / 1 map / 2
    assert out["neck_fg_loss"].item() == pytest.approx(16.0 / 2)
    assert out["neck_bg_loss"].item() == pytest.approx(4.0 / 2)
