"""YOLOX model package: SimOTA, losses, decoding and NMS on hand-computed cases; published
parameter counts; a few real training steps; the detector contract through the CLI."""
import math

import pytest
import torch
import torch.nn.functional as F
import yaml
from click.testing import CliRunner

from up_trainer.cli import main
from up_trainer.errors import ConfigError
from up_trainer.registry import MODELS
from up_trainer.tasks.det.yolox import (Assignment, SimOTAAssigner, YoloxCriterion, YoloxPostprocess, build_yolox,
                                        flatten_outputs, iou_loss, l1_targets)

STRIDE = 8


def _grid_4x4():
    """16 points of one stride-8 level over a 32x32 image: centres (4 + 8j, 4 + 8i), row-major."""
    ys, xs = torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="ij")
    centers = torch.stack((xs, ys), -1).reshape(-1, 2) * STRIDE + STRIDE / 2
    return centers, torch.full((16,), float(STRIDE))


def _cxcywh(xyxy):
    x1, y1, x2, y2 = xyxy
    return [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]


def _preds(per_point, default=(0.0, 0.0, 1.0, 1.0)):
    """Decoded boxes [16, 4] (cx, cy, w, h): the xyxy box given per point, a far-away box elsewhere."""
    return torch.tensor([_cxcywh(per_point.get(i, default)) for i in range(16)])


def test_simota_dynamic_k_follows_the_iou_sum():
    centers, strides = _grid_4x4()
    gt = torch.tensor([[0.0, 0, 16, 16], [16, 16, 32, 32]])
    # radius 0.5 stride: each box's candidates are the 4 cells whose centre is within 4 px of its centre
    # box 0 (points 0, 1, 4, 5): IoUs 1, 0.5, 0.25, 0.75 -> sum 2.5 -> k = 2 -> points 0 and 5 (best IoUs)
    # box 1 (points 10, 11, 14, 15): IoUs 0.25, 0.25, 0.25, 0.5 -> sum 1.25 -> k = 1 -> point 15
    boxes = _preds({0: (0, 0, 16, 16), 1: (0, 0, 16, 8), 4: (0, 0, 8, 8), 5: (0, 0, 16, 12),
                    10: (16, 16, 24, 24), 11: (16, 16, 24, 24), 14: (16, 16, 24, 24), 15: (16, 16, 32, 24)})
    a = SimOTAAssigner(center_radius=0.5).assign(centers, strides, torch.zeros(16, 3), boxes, torch.zeros(16, 1),
                                                 gt, torch.tensor([1, 2]))
    assert a.fg_mask.nonzero()[:, 0].tolist() == [0, 5, 15]
    assert a.matched_gt.tolist() == [0, 0, 1] and a.num_fg == 3
    assert a.matched_iou.tolist() == pytest.approx([1.0, 0.75, 0.5])


def test_simota_candidates_are_inside_the_box_or_its_centre_region():
    centers, strides = _grid_4x4()
    gt = torch.tensor([[1.0, 1, 7, 31]])  # a thin box: only column 0 has centres inside it
    cand, both = SimOTAAssigner().candidates(centers, strides, gt)
    # radius 2.5 strides: |x - 4| < 20 and |y - 16| < 20 -> columns 0-2 (x = 4, 12, 20), every row
    assert cand.nonzero()[:, 0].tolist() == [i for i in range(16) if i % 4 != 3]
    assert both[0].nonzero()[:, 0].tolist() == [0, 4, 8, 12]  # inside the box and the region: column 0
    cand, both = SimOTAAssigner(center_radius=1.0).candidates(centers, strides, gt)
    # within 8 px of (4, 16) (strictly): x = 4, y = 12 or 20 -> points 4, 8; the box adds column 0
    assert cand.nonzero()[:, 0].tolist() == [0, 4, 8, 12]
    assert both[0].nonzero()[:, 0].tolist() == [4, 8]


@pytest.mark.parametrize("favoured, winner", [(False, 0), (True, 1)])
def test_simota_a_point_wanted_by_two_boxes_keeps_its_cheapest(favoured, winner):
    centers, strides = _grid_4x4()
    gt = torch.tensor([[0.0, 0, 16, 16], [0, 0, 16, 12]])
    # point 0's prediction: IoU 0.875 with box 0, 192/224 = 0.857 with box 1; the rest barely overlap,
    # so each box has k = 1 and takes point 0; equal class costs -> the higher IoU (box 0) wins
    boxes = _preds({0: (0, 0, 16, 14), 1: (12, 0, 14, 2), 4: (0, 12, 2, 14), 5: (12, 12, 14, 14)})
    cls = torch.zeros(16, 2)
    if favoured:  # point 0 leans to box 1's class: cost 1.25 + 3 * 0.15 for box 1, 4.08 + 3 * 0.13 for box 0
        cls[0] = torch.tensor([0.0, 3.0])
    obj = torch.full((16, 1), 10.0)
    a = SimOTAAssigner(center_radius=0.5).assign(centers, strides, cls, boxes, obj, gt, torch.tensor([1, 2]))
    assert a.fg_mask.nonzero()[:, 0].tolist() == [0] and a.matched_gt.tolist() == [winner]
    assert a.matched_iou.item() == pytest.approx([0.875, 192 / 224][winner])


def test_simota_without_boxes_or_candidates_assigns_nothing():
    centers, strides = _grid_4x4()
    args = (torch.zeros(16, 2), _preds({}), torch.zeros(16, 1))
    a = SimOTAAssigner().assign(centers, strides, *args, torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))
    assert a.num_fg == 0 and not a.fg_mask.any()
    far = torch.tensor([[500.0, 500, 510, 510]])
    assert SimOTAAssigner().assign(centers, strides, *args, far, torch.tensor([1])).num_fg == 0


def test_iou_losses_against_hand_values():
    a, b = torch.tensor([[0.0, 0, 2, 2], [0, 0, 4, 4]]), torch.tensor([[1.0, 1, 3, 3], [0, 0, 4, 4]])
    iou = 1 / 7  # intersection 1, union 7
    assert iou_loss(a, b, "iou").tolist() == pytest.approx([-math.log(iou), 0.0], abs=1e-6)  # UP's iou: -log
    assert iou_loss(a, b, "linear_iou").tolist() == pytest.approx([1 - iou, 0.0], abs=1e-6)
    apart = torch.tensor([[10.0, 10, 12, 12]])
    assert iou_loss(a[:1], apart, "iou").item() == pytest.approx(-math.log(1e-7))  # no overlap: finite
    assert iou_loss(a, b, "square_iou").tolist() == pytest.approx([1 - iou ** 2, 0.0], abs=1e-6)
    assert iou_loss(a, b, "giou").tolist() == pytest.approx([1 - (iou - 2 / 9), 0.0], abs=1e-6)  # hull 9
    with pytest.raises(ConfigError):
        iou_loss(a, b, "diou")


class _FixedAssigner:
    """Point 1 of image 0 matched to its box 0 with IoU 0.6; nothing else."""

    def assign(self, centers, strides, cls, boxes, obj, gt_boxes, gt_labels, img_size=None):
        fg = torch.tensor([False, True, False])
        return Assignment(fg, torch.tensor([0]), torch.tensor([0.6]))


def test_criterion_bce_with_iou_target_obj_iou_and_l1_against_hand_values():
    centers, strides = torch.tensor([[4.0, 4], [12, 4], [4, 12]]), torch.full((3,), 8.0)
    gt = torch.tensor([[8.0, 0, 16, 8]])  # decoded exactly by point 1's raw output (0.5, 0.5, 0, 0)
    raw = torch.tensor([[[0.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.0, 0, 0, 0]]])
    out = {"cls": torch.tensor([[[0.0, 0], [2.0, -1.0], [0, 0]]]), "obj": torch.tensor([[[1.0], [0.5], [-2.0]]]),
           "raw_box": raw, "box": torch.tensor([[[4.0, 4, 8, 8], [12, 4, 6, 8], [4, 12, 8, 8]]]),
           "centers": centers, "strides": strides}
    losses = YoloxCriterion(2, "square_iou", 5.0, assigner=_FixedAssigner())(
        out, [{"boxes": gt, "labels": torch.tensor([1])}], use_l1=True)

    def bce(x, t):
        return math.log(1 + math.exp(x)) - t * x

    assert losses["loss_cls"].item() == pytest.approx(bce(2.0, 0.6) + bce(-1.0, 0.0))  # target one-hot * IoU
    assert losses["loss_obj"].item() == pytest.approx(bce(1.0, 0) + bce(0.5, 1) + bce(-2.0, 0))
    # point 1's box [9, 0, 15, 8] against [8, 0, 16, 8]: IoU 48/64
    assert losses["loss_iou"].item() == pytest.approx(5.0 * (1 - 0.75 ** 2), rel=1e-5)
    assert l1_targets(gt, centers[1:2], strides[1:2])[0].tolist() == pytest.approx([0.5, 0.5, 0.0, 0.0], abs=1e-6)
    assert losses["loss_l1"].item() == pytest.approx(0.0, abs=1e-6)


def test_decode_and_per_class_nms_on_a_constructed_head_output():
    cls = torch.full((1, 2, 2, 2), -20.0)  # 2 classes, a 2x2 stride-8 map
    reg = torch.zeros(1, 4, 2, 2)
    obj = torch.full((1, 1, 2, 2), 20.0)
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    # cell (0, 1) -> centre (12, 4), 16x16 -> [4, -4, 20, 12], clipped to the 16x16 image -> [4, 0, 16, 12]
    reg[0, :, 0, 1] = torch.tensor([0.5, 0.5, math.log(2), math.log(2)])
    cls[0, 0, 0, 1] = logit(0.9)
    # cell (1, 1) -> centre (12, 12) 16x16 -> [4, 4, 20, 20] -> [4, 4, 16, 16]: class 0 again,
    # IoU with the first 96/192 = 0.5 > 0.4 -> suppressed; its class-1 score survives (other class)
    reg[0, :, 1, 1] = torch.tensor([0.5, 0.5, math.log(2), math.log(2)])
    cls[0, 0, 1, 1], cls[0, 1, 1, 1] = logit(0.8), logit(0.7)
    cls[0, 1, 0, 0] = logit(0.005)  # below the score threshold
    outputs = flatten_outputs([(cls, reg, obj)], [8])
    assert outputs["box"][0, 1].tolist() == pytest.approx([12, 4, 16, 16])
    dets = YoloxPostprocess(score_thresh=0.01, nms_thresh=0.4)(outputs, [(16, 16)])[0]
    assert dets["labels"].tolist() == [1, 2]
    assert dets["scores"].tolist() == pytest.approx([0.9, 0.7], rel=1e-4)
    assert dets["boxes"].flatten().tolist() == pytest.approx([4, 0, 16, 12, 4, 4, 16, 16])
    assert len(YoloxPostprocess(detections_per_img=1)(outputs, [(16, 16)])[0]["boxes"]) == 1


@pytest.mark.parametrize("size, published", [("nano", 0.91e6), ("tiny", 5.06e6), ("s", 9.0e6)])
def test_parameter_counts_match_the_published_ones(size, published):
    model = build_yolox(80, size)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(published, rel=0.02)
    assert [n for n, _ in model.named_children()] == ["backbone", "neck", "roi_head"]


def _tiny(**kw):
    return MODELS.build({"type": "yolox", "kwargs": {"num_classes": 10, "size": "nano", "width": 0.125, **kw}})


def _digit_batch(n=4, size=48):
    from up_trainer.tasks.det.digits_det import DigitsDetection

    data = DigitsDetection("train", n, size, [1, 3], [10, 16], seed=0)
    samples = [data[i] for i in range(n)]
    return {"image": [s["image"] for s in samples], "target": [s["target"] for s in samples]}


def test_a_few_training_steps_on_digit_scenes_lower_the_loss():
    torch.manual_seed(0)
    model, batch = _tiny(), _digit_batch()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    totals = []
    for _ in range(20):
        losses = model(batch)
        assert set(losses) == {"loss_cls", "loss_obj", "loss_iou"}
        total = sum(losses.values())
        opt.zero_grad()
        total.backward()
        opt.step()
        totals.append(total.item())
    assert sum(totals[-3:]) / 3 < 0.75 * sum(totals[:3]) / 3, totals


def test_eval_contract_and_use_l1():
    torch.manual_seed(0)
    model, batch = _tiny(score_thresh=0.0, detections_per_img=7), _digit_batch(2)
    batch["image"][1] = batch["image"][1][:, :40, :35]  # images of different sizes in one batch
    model.use_l1 = True
    assert set(model(batch)) == {"loss_cls", "loss_obj", "loss_iou", "loss_l1"}
    model.eval()
    with torch.no_grad():
        out = model(batch)
        bare = model({"image": batch["image"]})
    assert {"loss_cls", "loss_obj", "loss_iou", "loss_l1"} < set(out) and set(bare) == {"detections"}
    for det, (h, w) in zip(out["detections"], [(48, 48), (40, 35)]):
        assert det["boxes"].shape == (7, 4) and det["scores"].shape == (7,) and det["labels"].dtype == torch.int64
        assert det["labels"].min() >= 1 and det["labels"].max() <= 10
        assert det["boxes"][:, 2].max() <= w and det["boxes"][:, 3].max() <= h
    assert model(torch.zeros(2, 3, 40, 40))["detections"][1]["boxes"].shape[1] == 4  # a bare tensor


def test_bad_kwargs_are_config_errors():
    for kw in ({"size": "huge"}, {"act": "gelu"}, {"iou_loss": "ciou"}, {"nms_thresh": 2.0}, {"num_classes": 0}):
        with pytest.raises(ConfigError):
            _tiny(**kw)


def test_train_eval_predict_and_flops_through_the_cli(tmp_path):
    scenes = {"canvas_size": 48, "digits_per_image": [1, 2], "scale_range": [10, 16], "seed": 0}
    cfg = {"runtime": {"seed": 0, "num_threads": 1},
           "dataset": {"train": {"type": "digits_det", "kwargs": {"split": "train", "num_images": 2, **scenes}},
                       "test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 2, **scenes}},
                       "batch_size": 2},
           "trainer": {"max_epoch": 1, "optimizer": {"type": "AdamW", "kwargs": {"lr": 0.001}}},
           "hooks": [{"type": "ema", "kwargs": {"decay": 0.9}}],
           "net": {"type": "yolox", "kwargs": {"num_classes": 10, "size": "nano", "width": 0.125}}}
    path = tmp_path / "yolox.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = CliRunner()
    res = run.invoke(main, ["train", "--config", str(path), "--work-dir", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "ckpt_e1.pth", weights_only=True)
    assert isinstance(ckpt["metric_val"], float)  # the COCO evaluator read the detections
    assert {k.split(".")[0] for k in ckpt["model"]} == {"backbone", "neck", "roi_head"}
    res = run.invoke(main, ["flops", "--config", str(path)])
    assert res.exit_code == 0 and "roi_head" in res.output, res.output
    png = tmp_path / "scene.png"
    from up_trainer.render import save_png

    save_png((torch.rand(3, 48, 48) * 255).to(torch.uint8), str(png))
    res = run.invoke(main, ["predict", "--config", str(path), "--checkpoint",
                            str(tmp_path / "run" / "checkpoints" / "ckpt_e1.pth"), "--input", str(png),
                            "--out", str(tmp_path / "pred")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert (tmp_path / "pred" / "predictions.jsonl").exists()
    res = run.invoke(main, ["export", "--config", str(path), "--format", "torchscript", "--checkpoint",
                            str(tmp_path / "run" / "checkpoints" / "ckpt_e1.pth")])
    assert res.exit_code == 2 and "torchscript export of yolox is not supported" in res.output, res.output


def test_bfloat16_autocast_keeps_boxes_and_losses_in_float32():
    torch.manual_seed(0)
    model, batch = _tiny(score_thresh=0.0), _digit_batch(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = model(batch)
        model.eval()
        with torch.no_grad():
            det = model({"image": batch["image"]})["detections"][0]
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in losses.values())
    assert det["boxes"].dtype == torch.float32 and len(det["boxes"]) > 0
