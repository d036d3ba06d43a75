"""UP's OneNet (onenet_post): the matching cost and losses against hand computations, the
NMS-free prediction, UP's kwargs, and a training run on digit scenes to a non-trivial AP."""
import copy
import math
import os

import pytest
import torch
import yaml

from conftest import UP_FIXTURES
from up_trainer.errors import ConfigError
from up_trainer.tasks.det.box_ops import box_coder
from up_trainer.tasks.det.onenet import OneNetCriterion, OneNetMatcher, OneNetPredictor, sigmoid_focal_sum
from up_trainer.tasks.up_nets import build_up_net, check_up_net

R18 = os.path.join(UP_FIXTURES, "det", "onenet", "onenet-r18.yaml")


def up_net():
    with open(R18) as f:
        return yaml.safe_load(f)["net"]


def test_matching_cost_by_hand():
    """One anchor predicting the box exactly with p = 0.5 against one far off with p = 0.9."""
    m = OneNetMatcher(cost_cls=2.0, cost_l1=5.0, cost_giou=2.0)
    gt = torch.tensor([[10.0, 10, 30, 30]])
    boxes = torch.tensor([[10.0, 10, 30, 30], [40, 40, 60, 60]])
    logits = torch.tensor([[0.0, -5.0], [math.log(9.0), -5.0]])  # class 1: p = 0.5, 0.9
    whwh = torch.tensor([100.0, 100, 100, 100])
    cost = m.cost(logits, boxes, torch.tensor([1]), gt, whwh)

    def focal(p):
        return 0.25 * (1 - p) ** 2 * -math.log(p) - 0.75 * p ** 2 * -math.log(1 - p)

    # anchor 1: L1 = 4 x 30 / 100, GIoU = 0 - (50 x 50 - 800) / 2500 = -0.68
    assert cost[0, 0].item() == pytest.approx(2 * focal(0.5) + 0 - 2 * 1.0, abs=1e-5)
    assert cost[1, 0].item() == pytest.approx(2 * focal(0.9) + 5 * 1.2 + 2 * 0.68, abs=1e-5)
    assert m(logits, boxes, torch.tensor([1]), gt, whwh).tolist() == [0]
    # an inverted prediction costs as an empty box at the origin
    inverted = torch.tensor([[30.0, 30, 10, 10]])
    giou_empty = -(30 * 30 - 20 * 20) / (30 * 30)  # no overlap; hull [0, 30]^2, union the 20 x 20 box
    c = m.cost(logits[:1], inverted, torch.tensor([1]), gt, whwh)
    assert c[0, 0].item() == pytest.approx(2 * focal(0.5) + 5 * 0.8 - 2 * giou_empty, abs=1e-5)


def test_losses_by_hand():
    """Two anchors, one box matched exactly by anchor 0: focal over both anchors' two classes,
    GIoU loss 0, L1 0, divided by one box; with QFL the soft target is the IoU (1 here)."""
    coder = box_coder()
    anchors = [torch.tensor([[10.0, 10, 30, 30], [40, 40, 60, 60]])]
    outputs = {"cls": torch.tensor([[[0.0, -1.0], [1.0, 0.5]]]), "deltas": torch.zeros(1, 2, 4)}
    targets = [{"boxes": torch.tensor([[10.0, 10, 30, 30]]), "labels": torch.tensor([1])}]
    crit = OneNetCriterion(coder, OneNetMatcher(2.0, 5.0, 2.0), sigmoid_focal_sum, cls_weight=2.0, giou_weight=2.0,
                           l1_weight=5.0)
    losses = crit(outputs, anchors, targets, [(100, 100)])

    def fl(x, t, a=0.25, g=2.0):
        p = 1 / (1 + math.exp(-x))
        return -(a * (1 - p) ** g * math.log(p)) if t else -((1 - a) * p ** g * math.log(1 - p))

    hand = fl(0.0, 1) + fl(-1.0, 0) + fl(1.0, 0) + fl(0.5, 0)
    assert losses["loss_cls"].item() == pytest.approx(2 * hand, rel=1e-5)
    assert losses["loss_loc"].item() == pytest.approx(0.0, abs=1e-6) and losses["loss_l1"].item() == 0.0
    moved = {"cls": outputs["cls"], "deltas": torch.tensor([[[0.1, 0.0, 0.0, 0.0], [0.0] * 4]])}
    shifted = crit(moved, anchors, targets, [(100, 100)])  # box moved 2 px right: L1 = 4 / 100 x 5
    assert shifted["loss_l1"].item() == pytest.approx(2 * 2 / 100 * 5.0, rel=1e-5)


def test_prediction_keeps_top_scores_without_nms():
    coder = box_coder()
    anchors = [torch.tensor([[10.0, 10, 30, 30], [11, 10, 31, 30], [40, 40, 60, 60]])]
    outputs = {"cls": torch.tensor([[[3.0, -9.0], [2.0, -9.0], [-9.0, 1.0]]]), "deltas": torch.zeros(1, 3, 4)}
    out = OneNetPredictor(coder, topk_boxes=3)(outputs, anchors, [(100, 100)])[0]
    assert out["labels"].tolist() == [1, 1, 2]  # the two overlapping boxes both stay
    assert out["boxes"][1].tolist() == [11.0, 10.0, 31.0, 30.0]


def test_up_file_net_maps_and_refusals_name_the_kwarg():
    check_up_net(up_net())
    model = build_up_net(copy.deepcopy(up_net()))
    assert [n for n, _ in model.named_children()][:3] == ["backbone", "neck", "roi_head"]
    assert model.criterion.use_qfl and model.criterion.l1_weight == 5.0 and model.predictor.topk_boxes == 100
    # UP-named weights: the backbone's and the normalised FPN's names rewritten, the head's kept
    up_names = {"backbone.layer0.0.weight": "backbone.conv1.weight",
                "neck.c3_lateral.conv.weight": "neck.inner_blocks.0.0.weight",
                "neck.p7_conv.bias": "neck.extra_blocks.convs.1.bias",
                "roi_head.cls_subnet.3.2.1.weight": "roi_head.cls_subnet.3.2.1.weight",
                "roi_head.box_subnet_pred.weight": "roi_head.box_subnet_pred.weight"}
    assert set(model.translate_up_weights({k: 0 for k in up_names})) == set(up_names.values()) \
        <= set(model.state_dict())
    for index, key, value, message in [
        (3, "net_type", "fcos", "net[3].kwargs.net_type: 'fcos' is not supported"),
        (3, "cfg.roi_supervisor.kwargs.matcher.kwargs.easy_match", False, "easy_match: False is not supported"),
        (3, "use_qfl", False, "net[3].kwargs.use_qfl: False with quality_focal_loss is not mapped"),
        (2, "num_anchors", 3, "net[2].kwargs.num_anchors: 3 but anchor_ratios x anchor_scales give 2"),
    ]:
        net = up_net()
        node = net[index]["kwargs"]
        *path, last = key.split(".")
        for k in path:
            node = node[k]
        node[last] = value
        with pytest.raises(ConfigError) as err:
            check_up_net(net)
        assert message in str(err.value), str(err.value)


def small_net():
    """The UP file's net at digit-scene size: strides 8-32, 64 channels, anchors of 16 and 24
    pixels at stride 8 (the file's 6 and 8 strides are for COCO's objects)."""
    net = up_net()
    net[0]["kwargs"].update(frozen_layers=[], out_layers=[2, 3, 4], out_strides=[8, 16, 32])
    net[1]["kwargs"].update(outplanes=64, num_level=3, out_strides=[8, 16, 32])
    net[2]["kwargs"].update(feat_planes=64, num_level=3, num_classes=11)
    net[3]["kwargs"]["num_classes"] = 11
    net[3]["kwargs"]["cfg"]["anchor_generator"]["kwargs"]["anchor_scales"] = [2, 3]
    return net


@pytest.mark.slow
def test_onenet_trains_on_digit_scenes_to_a_non_trivial_ap():
    from up_trainer.tasks.det.digits_det import DigitsDetection
    from up_trainer.tasks.det.evaluator import CocoEvaluator

    torch.manual_seed(0)
    torch.set_num_threads(2)
    scenes = dict(canvas_size=48, digits_per_image=[1, 1], scale_range=[16, 24])
    train = DigitsDetection("train", num_images=64, **scenes)
    val = DigitsDetection("val", num_images=32, **scenes)
    model = build_up_net(small_net())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    model.train()
    for step in range(STEPS):
        batch = train.collate_fn([train[(step * 8 + i) % len(train)] for i in range(8)])
        losses = model(batch)
        opt.zero_grad()
        sum(losses.values()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.eval()
    ev = CocoEvaluator(per_class=False, backend="pycocotools")
    with torch.no_grad():
        for start in range(0, len(val), 8):
            batch = val.collate_fn([val[i] for i in range(start, min(start + 8, len(val)))])
            ev.process(batch, model({"image": batch["image"]}))
    ap = ev.evaluate(ev.results())["bbox.AP50"]
    print(f"OneNet digits AP50 {ap:.3f} after {STEPS} steps")
    # measured: AP50 0.123 after 250 steps (8.7 min at load 7-12 on 2 cores), 0.119 after 600
    # (7.4 min at load 3-5): a plateau on 64 scenes; 0.038 with the file's 48 / 64 pixel anchors. OneNet from scratch learns slowly: this shows it learns, the
    # bar is above chance, not a converged detector
    assert ap > 0.08


STEPS = int(os.environ.get("ONENET_STEPS", 250))


def test_range_crop_resizes_then_cuts_a_window_keeping_overlapping_boxes():
    from torchvision import tv_tensors

    from up_trainer.tasks.det.onenet.transforms import RangeCrop
    from up_trainer.tasks.det.pipeline import from_pipeline

    torch.manual_seed(0)
    crop = RangeCrop(crop_size=[20, 24], scales=[32], crop_prob=1.0)
    image = tv_tensors.Image(torch.rand(3, 48, 64))
    boxes = torch.tensor([[0.0, 0, 64, 48], [60, 44, 64, 48]])  # the whole image; a corner
    target = {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(48, 64)),
              "labels": torch.tensor([1, 2])}
    for _ in range(20):
        out, t = from_pipeline(*crop(image, dict(target)))
        h, w = out.shape[-2:]
        assert 20 <= h <= 24 and 20 <= w <= 24  # resized to 32 x 43 first, then the window
        assert t["boxes"][0].tolist() == [0.0, 0.0, float(w), float(h)]  # clipped to the window
        assert t["labels"][0] == 1 and ((t["boxes"][:, 2:] > t["boxes"][:, :2]).all())
    with pytest.raises(ConfigError, match="crop_size"):
        RangeCrop(crop_size=[600, 384], scales=[400])
    assert RangeCrop(crop_size=[1, 2], scales=[8], crop_prob=0.0)(image, target)[0] is image
