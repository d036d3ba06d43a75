"""UP's improved RetinaNet parts (up_trainer.tasks.det.atss) on hand-computed cases, a
few training steps on digit scenes, and the native ``atss`` net through the CLI."""
import math

import pytest
import torch
import yaml
from click.testing import CliRunner

from up_trainer.cli import main
from up_trainer.errors import ConfigError
from up_trainer.registry import MODELS
from up_trainer.tasks.det.atss import (ATSSAssigner, RetinaPlusPredictor, RetinaSimOTAAssigner, box_coder,
                                              flatten_outputs, grid_anchors, quality_focal_loss)

T = torch.tensor


# -- ATSS -----------------------------------------------------------------------------------------
def _two_levels():
    fine = T([[0., 0, 10, 10], [10, 0, 20, 10], [20, 0, 30, 10], [30, 0, 40, 10]])  # centres y=5, x=5..35
    coarse = T([[0., 0, 20, 20], [20, 0, 40, 20]])  # centres (10, 10), (30, 10)
    return [fine, coarse]


def test_atss_threshold_is_mean_plus_std_of_the_nearest_per_level():
    # Box [0,0,20,20], centre (10,10), top_k 2. Nearest: fine anchors 0, 1 (IoU 100/400 = .25 each),
    # coarse 0 (IoU 1) and 1 (IoU 0). mean .375, sample std sqrt(.5625 / 3) = .433 -> threshold .808:
    # only coarse anchor 0 (index 4) is positive, though the fine ones' centres lie inside the box.
    matched = ATSSAssigner(top_k=2).assign(_two_levels(), T([[0., 0, 20, 20]]))
    assert matched.tolist() == [-1, -1, -1, -1, 0, -1]


def test_atss_anchor_positive_for_two_boxes_takes_the_higher_iou():
    # Box [0,0,16,16]: candidates' IoUs .390625, 60/296, .64, 0 -> mean .308, std .273, threshold .581:
    # coarse anchor 0 is positive for it too (IoU .64), but its IoU with [0,0,20,20] is 1.
    for boxes, want in ((T([[0., 0, 20, 20], [0, 0, 16, 16]]), 0), (T([[0., 0, 16, 16], [0, 0, 20, 20]]), 1)):
        matched = ATSSAssigner(top_k=2).assign(_two_levels(), boxes)
        assert matched.tolist() == [-1, -1, -1, -1, want, -1]


def test_atss_positive_needs_the_anchor_centre_inside_the_box():
    # Three 20x20 anchors containing the box [0,0,10,10]: IoU .25 each, so std 0 and all reach the
    # threshold; only the first has its centre inside (the others' centres sit on the box's edge).
    anchors = [T([[-5., -5, 15, 15], [-10, -5, 10, 15], [-5, -10, 15, 10]])]
    assert ATSSAssigner(top_k=3).assign(anchors, T([[0., 0, 10, 10]])).tolist() == [0, -1, -1]


def test_atss_without_boxes_all_negative_and_degenerate_boxes_skipped():
    a = ATSSAssigner(top_k=2)
    assert a.assign(_two_levels(), torch.zeros(0, 4)).tolist() == [-1] * 6
    matched = a.assign(_two_levels(), T([[5., 5, 5, 9], [0, 0, 20, 20]]))  # a zero-width box first
    assert matched.tolist() == [-1, -1, -1, -1, 1, -1]
    with pytest.raises(ValueError):
        ATSSAssigner(top_k=0)


def test_retina_simota_takes_the_anchor_whose_prediction_fits():
    # Box [0,0,16,16]; three 16x16 anchors of stride 8 whose points (centre + half a stride) are
    # (12,12), (8,8), (44,12): the third lies outside the box and its centre region (2.5 strides
    # = 20 px around (8,8)). Anchor 1 predicts the box exactly (IoU 1: k = int(1 + .25) = 1), anchor 0
    # a box of IoU .25: anchor 1 is the box's one positive. Anchor 2's exact prediction is too far.
    anchors = [T([[0., 0, 16, 16], [-4, -4, 12, 12], [32, 0, 48, 16]])]
    preds = T([[0., 0, 8, 8], [0, 0, 16, 16], [0, 0, 16, 16]])
    cls = torch.zeros(3, 2)
    matched = RetinaSimOTAAssigner([8]).assign(anchors, T([[0., 0, 16, 16]]), (64, 64), gt_labels=T([2]),
                                               cls_logits=cls, pred_boxes=preds)
    assert matched.tolist() == [-1, 0, -1]
    assert RetinaSimOTAAssigner([8]).assign(anchors, torch.zeros(0, 4), (64, 64), gt_labels=T([]).long(),
                                            cls_logits=cls, pred_boxes=preds).tolist() == [-1, -1, -1]


# -- Quality Focal Loss -----------------------------------------------------------------------------
def _bce(x, y):
    p = 1 / (1 + math.exp(-x))
    return -(y * math.log(p) + (1 - y) * math.log(1 - p)), p


def test_quality_focal_loss_against_hand_values():
    logits = T([[0.0, 2.0], [-1.0, 0.5], [3.0, 3.0]])
    labels = T([2, 0, -1])  # a positive of class 2, a negative, an ignored row
    quality = T([0.6, 0.9, 0.9])
    want = 0.0
    for x, y in ((0.0, 0.0), (2.0, 0.6), (-1.0, 0.0), (0.5, 0.0)):
        loss, p = _bce(x, y)
        want += loss * abs(y - p) ** 2
    got = quality_focal_loss(logits, labels, quality, beta=2.0)
    assert got.item() == pytest.approx(want, rel=1e-5)
    # beta scales the modulator: at beta 0 QFL is the plain BCE against the soft target
    plain = sum(_bce(x, y)[0] for x, y in ((0.0, 0.0), (2.0, 0.6), (-1.0, 0.0), (0.5, 0.0)))
    assert quality_focal_loss(logits, labels, quality, beta=0.0).item() == pytest.approx(plain, rel=1e-5)


# -- scoring and prediction -------------------------------------------------------------------------
def test_iou_branch_scores_are_cls_times_sigmoid_iou():
    outputs = {"cls": T([[[0.0, 2.0]]]), "iou": T([[math.log(3.0)]])}  # sigmoid: .5, .8808; iou .75
    scores = RetinaPlusPredictor.scores(outputs)
    assert scores[0, 0].tolist() == pytest.approx([0.375, 0.75 / (1 + math.exp(-2.0))], rel=1e-6)
    assert RetinaPlusPredictor.scores({"cls": T([[[0.0]]]), "iou": None}).item() == pytest.approx(0.5)


def test_nms_keeps_the_box_the_iou_branch_trusts():
    # Two overlapping anchors of one class: A has the higher class score (.9 vs .6) but predicts
    # IoU .2; B predicts .9. Scores .18 and .54: NMS keeps B. Without the branch it keeps A.
    anchors = [T([[0., 0, 10, 10], [1, 0, 11, 10]])]
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    outputs = {"cls": T([[[logit(0.9)], [logit(0.6)]]]), "deltas": torch.zeros(1, 2, 4),
               "iou": T([[logit(0.2), logit(0.9)]])}
    pred = RetinaPlusPredictor(box_coder(), "base", score_thresh=0.05, nms_thresh=0.5, detections_per_img=10)
    det = pred(outputs, anchors, [(20, 20)])[0]
    assert det["boxes"].tolist() == [[1.0, 0.0, 11.0, 10.0]] and det["scores"].item() == pytest.approx(0.54)
    assert det["labels"].tolist() == [1]
    det = pred({**outputs, "iou": None}, anchors, [(20, 20)])[0]
    assert det["boxes"].tolist() == [[0.0, 0.0, 10.0, 10.0]]


def test_base_multicls_takes_a_joint_top_k_base_one_per_class():
    scores = T([[0.9, 0.8], [0.7, 0.1], [0.2, 0.3]])  # 3 anchors x 2 classes
    joint = RetinaPlusPredictor(box_coder(), "base_multicls", pre_nms_top_n=2)._level(scores, 0.0)
    assert [t.tolist() for t in joint] == [[0, 0], [0, 1], pytest.approx([0.9, 0.8])]
    per_class = RetinaPlusPredictor(box_coder(), "base", pre_nms_top_n=2)._level(scores, 0.25)
    got = sorted(zip(per_class[0].tolist(), per_class[1].tolist()))
    assert got == [(0, 0), (0, 1), (1, 0), (2, 1)]  # each class's 2 best above .25


def test_flatten_orders_anchor_major_or_class_first():
    # 1 image, 2 anchors, 3 classes, a 1x1 map: channel a*3+c (anchor-major) or c*2+a (class-first)
    cls = torch.arange(6.0).view(1, 6, 1, 1)
    loc = torch.arange(8.0).view(1, 8, 1, 1)
    assert flatten_outputs([(cls, loc)])["cls"][0].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert flatten_outputs([(cls, loc)], class_first=True)["cls"][0].tolist() == [[0, 2, 4], [1, 3, 5]]
    assert flatten_outputs([(cls, loc)])["deltas"][0].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_grid_anchors_row_column_then_cell():
    cell = T([[-1., -1, 1, 1], [-2, -2, 2, 2]])
    a = grid_anchors(cell, 8, 2, 3)
    assert a.shape == (12, 4)
    assert a[0].tolist() == [-1, -1, 1, 1] and a[3].tolist() == [6, -2, 10, 2]  # (row 0, col 1, cell 1)
    assert a[6].tolist() == [-1, 7, 1, 9]  # row 1, col 0


# -- the model ---------------------------------------------------------------------------------------
def _tiny(**kw):
    kwargs = {"num_classes": 10, "backbone": "resnet18", "returned_layers": [2, 3], "fpn_channels": 32,
              "extra_levels": 1, "head_convs": 1, "anchor_scales": [4.0], **kw}
    return MODELS.build({"type": "atss", "kwargs": kwargs})


def _digit_batch(n=4, size=48):
    from up_trainer.tasks.det.digits_det import DigitsDetection

    data = DigitsDetection("train", n, size, [1, 3], [10, 16], seed=0)
    samples = [data[i] for i in range(n)]
    return {"image": [s["image"] for s in samples], "target": [s["target"] for s in samples]}


def test_a_few_training_steps_on_digit_scenes_lower_the_loss():
    # The box loss is the one to watch: QFL's and the IoU branch's targets are the positives' IoUs,
    # which rise as the boxes improve, so those two losses rise early in training by design.
    torch.manual_seed(0)
    model, batch = _tiny(), _digit_batch()
    assert [n for n, _ in model.named_children()] == ["backbone", "neck", "roi_head"]
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    loc = []
    for _ in range(20):
        losses = model(batch)
        assert set(losses) == {"loss_cls", "loss_loc", "loss_iou"}
        assert all(torch.isfinite(v) for v in losses.values())
        opt.zero_grad()
        sum(losses.values()).backward()
        opt.step()
        loc.append(losses["loss_loc"].item())
    assert sum(loc[-3:]) / 3 < 0.75 * sum(loc[:3]) / 3, loc


def test_eval_contract():
    torch.manual_seed(0)
    model, batch = _tiny(score_thresh=0.0, detections_per_img=7, head_norm="gn", iou_branch=False), _digit_batch(2)
    batch["image"][1] = batch["image"][1][:, :40, :35]  # images of different sizes in one batch
    model.eval()
    with torch.no_grad():
        out = model(batch)
        bare = model({"image": batch["image"]})
    assert {"loss_cls", "loss_loc"} < set(out) and "loss_iou" not in out and set(bare) == {"detections"}
    for det, (h, w) in zip(out["detections"], [(48, 48), (40, 35)]):
        assert det["boxes"].shape == (7, 4) and det["labels"].min() >= 1 and det["labels"].max() <= 10
        assert det["boxes"][:, 2].max() <= w and det["boxes"][:, 3].max() <= h


def test_bad_kwargs_are_config_errors():
    for kw in ({"head_norm": "ln"}, {"predictor": "fast"}, {"nms_thresh": 2.0}, {"num_classes": 0},
               {"anchor_scales": []}, {"image_mean": None}, {"extra_levels": -1}):
        with pytest.raises(ConfigError):
            _tiny(**kw)


def test_train_eval_predict_through_the_cli(tmp_path):
    scenes = {"canvas_size": 48, "digits_per_image": [1, 2], "scale_range": [10, 16], "seed": 0}
    cfg = {"runtime": {"seed": 0, "num_threads": 1},
           "dataset": {"train": {"type": "digits_det", "kwargs": {"split": "train", "num_images": 2, **scenes}},
                       "test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 2, **scenes}},
                       "batch_size": 2},
           "trainer": {"max_epoch": 1, "optimizer": {"type": "AdamW", "kwargs": {"lr": 0.001}}},
           "net": {"type": "atss", "kwargs": {"num_classes": 10, "backbone": "resnet18", "returned_layers": [2, 3],
                                              "fpn_channels": 32, "extra_levels": 1, "head_convs": 1}}}
    path = tmp_path / "atss.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = CliRunner()
    res = run.invoke(main, ["train", "--config", str(path), "--work-dir", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    ckpt_path = tmp_path / "run" / "checkpoints" / "ckpt_e1.pth"
    ckpt = torch.load(ckpt_path, weights_only=True)
    assert isinstance(ckpt["metric_val"], float)  # the COCO evaluator read the detections
    png = tmp_path / "scene.png"
    from up_trainer.render import save_png

    save_png((torch.rand(3, 48, 48) * 255).to(torch.uint8), str(png))
    res = run.invoke(main, ["predict", "--config", str(path), "--checkpoint", str(ckpt_path), "--input", str(png),
                            "--out", str(tmp_path / "pred")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert (tmp_path / "pred" / "predictions.jsonl").exists()


# -- UP's improve files ------------------------------------------------------------------------------
IMPROVE = ["det/retinanet/retinanet-r18-improve.yaml", "det/retinanet/retinanet-r18-improve_cos_iou.yaml"]


def _up_net(rel):
    from test_up_configs import UP_DIR

    with open(f"{UP_DIR}/{rel}", encoding="utf-8") as f:
        return yaml.safe_load(f)["net"]


def test_up_improve_nets_map_every_kwarg():
    from up_trainer.tasks.up_nets import build_up_net

    plain, iou = (build_up_net(_up_net(rel)) for rel in IMPROVE)
    for model in (plain, iou):
        assert model.strides == [8, 16, 32, 64, 128] and model.num_classes == 80
        assert model.roi_head.num_anchors == 2 and model.criterion.assigner.top_k == 18
        assert isinstance(model.neck.inner_blocks[0][1], torch.nn.BatchNorm2d)  # FPN normalize: solo_bn
        assert len(model.neck.extra_blocks.convs) == 2  # downsample: conv
        # conv weights shared by the levels, BatchNorm per level
        assert model.roi_head.cls_subnet[0][0][0] is model.roi_head.cls_subnet[4][0][0]
        assert model.roi_head.cls_subnet[0][0][1] is not model.roi_head.cls_subnet[4][0][1]
    assert not plain.roi_head.iou_branch and not plain.class_first and plain.criterion.l1_weight == 0
    assert iou.roi_head.iou_branch and iou.class_first and iou.criterion.l1_weight == 1.0
    assert plain.predictor.nms_thresh == 0.5 and iou.predictor.nms_thresh == 0.65
    ota = build_up_net(_up_net("det/retinanet/retinanet-r18-improve_ota.yaml"))
    assert isinstance(ota.criterion.assigner, RetinaSimOTAAssigner) and ota.criterion.assigner.strides == ota.strides
    # UP-named weights: the backbone's and the normalised FPN's names rewritten, the head's kept
    up_names = {"backbone.layer0.0.weight": "backbone.conv1.weight", "neck.c3_lateral.conv.weight":
                "neck.inner_blocks.0.0.weight", "neck.c5_lateral.bn.running_mean": "neck.inner_blocks.2.1.running_mean",
                "neck.p4_conv.bn.weight": "neck.layer_blocks.1.1.weight",
                "neck.p7_conv.bias": "neck.extra_blocks.convs.1.bias",
                "roi_head.cls_subnet.3.2.1.weight": "roi_head.cls_subnet.3.2.1.weight",
                "roi_head.iou_pred.weight": "roi_head.iou_pred.weight"}
    state = iou.state_dict()
    assert set(iou.translate_up_weights({k: 0 for k in up_names})) == set(up_names.values()) <= set(state)


@pytest.mark.parametrize("edit, message", [
    (lambda n: n[2]["kwargs"].update(share_subnet=True), "net[2].kwargs.share_subnet"),
    (lambda n: n[3].update(type="retina_post"), "net[3].type: retina_post with a head with an IoU branch"),
    (lambda n: n[3]["kwargs"]["cfg"]["roi_supervisor"]["kwargs"].update(use_iou=False),
     "net[3].kwargs.cfg.roi_supervisor.kwargs.use_iou"),
    (lambda n: n[3]["kwargs"]["cfg"]["loc_loss"]["kwargs"]["loss_cfg"][0]["kwargs"].update(loss_type="ciou"),
     "net[3].kwargs.cfg.loc_loss.kwargs.loss_cfg[0].kwargs.loss_type"),
    (lambda n: n[3]["kwargs"]["cfg"]["anchor_generator"]["kwargs"].update(anchor_scales=[8]),
     "net[2].kwargs.num_anchors: 2 but anchor_ratios x anchor_scales give 1"),
    (lambda n: n[3]["kwargs"]["cfg"].update(roi_supervisor={"type": "ota", "kwargs": {}}),
     "net[3].kwargs.cfg.roi_supervisor.type"),
])
def test_up_improve_net_refusals_name_the_kwarg(edit, message):
    from up_trainer.tasks.up_nets import build_up_net

    net = _up_net(IMPROVE[1])
    edit(net)
    with pytest.raises(ConfigError) as err:
        build_up_net(net)
    assert message in str(err.value), str(err.value)


def test_up_ota_file_trains_steps():
    from up_trainer.tasks.up_nets import build_up_net

    net = _up_net("det/retinanet/retinanet-r18-improve_ota.yaml")
    net[2]["kwargs"].update(num_conv=1, feat_planes=64)
    torch.manual_seed(0)
    model = build_up_net(net)
    batch = _digit_batch(2, 64)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(3):
        losses = model(batch)
        assert set(losses) == {"loss_cls", "loss_loc"} and all(torch.isfinite(v) for v in losses.values())
        opt.zero_grad()
        sum(losses.values()).backward()
        opt.step()
    net[3]["kwargs"]["cfg"]["roi_supervisor"]["kwargs"]["matcher"]["kwargs"]["use_SimOTA"] = False
    with pytest.raises(ConfigError, match="matcher.kwargs.use_SimOTA"):
        build_up_net(net)


def test_up_iou_head_with_one_groupnorm_tower_trains_a_step():
    from up_trainer.tasks.up_nets import build_up_net

    net = _up_net(IMPROVE[1])
    net[2].update(type="RetinaHeadWithIOU")
    net[2]["kwargs"].update(normalize={"type": "gn", "kwargs": {"num_groups": 32}}, num_conv=1, feat_planes=64)
    torch.manual_seed(0)
    model = build_up_net(net)
    tower = model.roi_head.cls_subnet
    assert [type(m).__name__ for m in tower] == ["Conv2d", "GroupNorm", "ReLU"] and tower[0].bias is None
    losses = model(_digit_batch(2, 64))
    assert set(losses) == {"loss_cls", "loss_loc", "loss_iou"}
    sum(losses.values()).backward()
    assert tower[0].weight.grad is not None and model.roi_head.iou_pred.weight.grad is not None


def test_an_image_without_boxes_and_bfloat16_autocast_train():
    torch.manual_seed(0)
    model, batch = _tiny(), _digit_batch(2)
    batch["target"][1] = {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = model(batch)
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    batch["target"][0] = batch["target"][1]  # no box in the whole batch: zero losses, still a graph
    losses = model(batch)
    assert losses["loss_loc"].item() == 0 and losses["loss_iou"].item() == 0
    sum(losses.values()).backward()


def test_up_base_multicls_predictor_and_retina_multicls_merger_map():
    from up_trainer.tasks.up_nets import check_up_net

    net = _up_net(IMPROVE[1])
    pred = net[3]["kwargs"]["cfg"]["roi_predictor"]
    pred["type"], pred["kwargs"]["merger"]["type"] = "base_multicls", "retina_multicls"
    check_up_net(net)  # builds on the meta device
    from up_trainer.tasks.up_nets.atss_net import _predictor
    from up_trainer.tasks.up_nets.options import Options

    got = _predictor(Options({"roi_predictor": pred}, "cfg", "cfg"))
    assert got["kind"] == "base_multicls" and got["nms_thresh"] == 0.65 and got["detections_per_img"] == 100
