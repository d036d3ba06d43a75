"""UP's YOLOv5 files (tests/fixtures/up/det/yolov5): DarkNetv5 + DarknetPAFPN + YoloV5Head +
yolov5_post. Sizes hand-counted against the published YOLOv5-s; UP's module names; the targets,
CIoU and space-to-depth order by hand; one-line refusals; a small net learns digit scenes."""
import copy
import math
import os

import pytest
import torch
import yaml

from up_trainer.errors import ConfigError
from up_trainer.tasks.det.yolov5 import BottleneckCSP, DarknetPAFPN, DarkNetv5, Focus, YoloV5Head, YoloV5Model, \
    ciou, level_targets
from up_trainer.tasks.net import build_model
from up_trainer.tasks.up_nets import check_up_net
from conftest import UP_FIXTURES  # noqa: E402

V5 = os.path.join(UP_FIXTURES, "det", "yolov5")
ANCHORS = os.path.join(V5, "anchors.json")


def up_net(act="silu", num_classes=None, init_planes=None):
    with open(os.path.join(V5, f"yolov5_small_{act}.yaml"), encoding="utf-8") as f:
        net = yaml.safe_load(f)["net"]
    net[3]["kwargs"]["cfg"]["anchor_generator"]["kwargs"]["base_anchors_file"] = ANCHORS
    if num_classes is not None:
        for entry in net[2:]:
            entry["kwargs"]["num_classes"] = num_classes
    if init_planes is not None:
        net[0]["kwargs"]["init_planes"] = init_planes
    return net


def n_params(module):
    return sum(p.numel() for p in module.parameters())


# UP's yolov5_small files build YOLOv5 v3.x/v4.0's yolov5s exactly (BottleneckCSP blocks, the Focus
# stem, SPP; one conv per output kind instead of one 255-channel conv, the same parameters): 7,468,157
# parameters at 80 classes, published as 7.5M. The later YOLOv5-s (v6.x: 7.2M, 7,235,389) changed two
# things, counted here: C3 blocks (no bare conv3 and a BatchNorm over h channels less: h^2 + 2h fewer
# per block of hidden width h) and 2 bottlenecks instead of 3 in the 128-channel stage (h = 64).
UP_YOLOV5S = 7_468_157
CSP_HIDDEN = [32, 64, 128, 256, 128, 64, 128, 256]  # backbone stages 1-4, neck top-down 2, bottom-up 2
BOTTLENECK_64 = (64 * 64 + 2 * 64) + (9 * 64 * 64 + 2 * 64)  # 1x1 and 3x3 ConvBnAct at 64 channels


def test_parameter_count_against_published_yolov5s():
    with torch.device("meta"):
        model = build_model(up_net())
    assert isinstance(model, YoloV5Model) and isinstance(model.backbone, DarkNetv5)
    assert isinstance(model.neck, DarknetPAFPN) and isinstance(model.roi_head, YoloV5Head)
    assert model.num_classes == 80 and model.strides == [8, 16, 32] and model.neck.out_channels == [128, 256, 512]
    assert n_params(model) == UP_YOLOV5S
    assert sum(isinstance(m, BottleneckCSP) for m in model.modules()) == len(CSP_HIDDEN)
    v6 = UP_YOLOV5S - sum(h * h + 2 * h for h in CSP_HIDDEN) - BOTTLENECK_64
    assert v6 == 7_235_389 and round(v6 / 1e5) / 10 == 7.2
    assert round(UP_YOLOV5S / 1e5) / 10 == 7.5


def test_up_names_are_the_models_own():
    with torch.device("meta"):
        keys = set(build_model(up_net()).state_dict())
    for key in ("backbone.focus.conv_block.conv.weight", "backbone.csp_modules.0.0.bn1.weight",
                "backbone.csp_modules.1.1.cbh_blocks.2.conv_block2.conv.weight",
                "backbone.csp_modules.3.1.conv_block2.bn1.bias",
                "backbone.csp_modules.3.2.conv3.weight", "neck.up_sample_stream.3.bn1.running_mean",
                "neck.down_sample_stream.5.conv_block4.conv.weight", "roi_head.cls_subnet.2.bias",
                "roi_head.loc_subnet.0.weight", "roi_head.obj_subnet.1.bias"):
        assert key in keys, key


def test_focus_stacks_pixels_in_ups_order():
    """UP's Space2Depth: channel blocks top-left, top-right, bottom-left, bottom-right."""
    focus = Focus(1, 4, 1, act=torch.nn.Identity)
    captured = {}
    focus.conv_block.register_forward_pre_hook(lambda m, args: captured.setdefault("x", args[0]))
    x = torch.arange(16.0).view(1, 1, 4, 4)
    focus(x)
    blocks = captured["x"][0]
    assert blocks[0].tolist() == [[0, 2], [8, 10]] and blocks[1].tolist() == [[1, 3], [9, 11]]
    assert blocks[2].tolist() == [[4, 6], [12, 14]] and blocks[3].tolist() == [[5, 7], [13, 15]]


def test_ciou_by_hand():
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0]])
    assert torch.allclose(ciou(a, a), torch.ones(1))
    b = torch.tensor([[1.0, 0.0, 3.0, 2.0]])  # same shape moved by 1: IoU 2/6, centres 1 apart, enclosure 3 x 2
    assert torch.allclose(ciou(a, b), torch.tensor([1 / 3 - 1 / 13]), atol=1e-6)


def test_targets_by_hand():
    """One 24 x 20 box centred at (28, 13) on a 64 x 64 batch, level stride 8 (8 x 8 cells),
    anchors 10x13, 16x30, 33x23 (size ratios all within 4: every anchor). The centre in cells is
    (3.5, 1.625): its cell (3, 1); of the neighbours only the one below is taken (1.625 is 0.375
    from the cell's bottom side, < pick_bias 0.5; x is 0.5 from both sides, not < 0.5; the top
    needs y % 1 < 0.5). The box is written as offsets from each cell's corner and size in cells."""
    anchors = torch.tensor([[10.0, 13.0], [16.0, 30.0], [33.0, 23.0]])
    box = torch.tensor([[16.0, 3.0, 40.0, 23.0]])
    box_gt, cls_gt, mask = level_targets([box], [torch.tensor([3])], anchors, 8, 8, 8, 5)
    cells = {(a, j, i) for a, j, i in mask[0].nonzero().tolist()}
    assert cells == {(a, j, 3) for a in range(3) for j in (1, 2)}
    assert box_gt[0, 0, 1, 3].tolist() == [0.5, 0.625, 3.0, 2.5]
    assert box_gt[0, 0, 2, 3].tolist() == [0.5, -0.375, 3.0, 2.5]
    assert cls_gt[0, :, 1, 3].argmax(-1).tolist() == [2, 2, 2] and cls_gt.sum() == 6


def test_trains_a_step_and_predicts():
    torch.manual_seed(0)
    model = build_model(up_net(num_classes=4, init_planes=8))
    batch = {"image": [torch.rand(3, 64, 64), torch.rand(3, 64, 96)],
             "target": [{"boxes": torch.tensor([[4.0, 6.0, 30.0, 40.0]]), "labels": torch.tensor([1])},
                        {"boxes": torch.tensor([[20.0, 20.0, 60.0, 50.0], [2.0, 2.0, 12.0, 14.0]]),
                         "labels": torch.tensor([2, 3])}]}
    losses = model.train()(batch)
    assert set(losses) == {"loss_box", "loss_obj", "loss_cls"} and all(torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    assert model.roi_head.loc_subnet[0].weight.grad.abs().sum() > 0
    model.predictor_kwargs["conf_thres"] = 0.0
    with torch.no_grad():
        out = model.eval()({"image": batch["image"]})
    for det, (h, w) in zip(out["detections"], [(64, 64), (64, 96)]):
        assert 0 < len(det["boxes"]) <= 300 and det["labels"].min() >= 1 and det["labels"].max() <= 3
        assert det["boxes"][:, 2].max() <= w and det["boxes"][:, 3].max() <= h


def test_yolov5_init_sets_ups_batchnorm_settings():
    with torch.device("meta"):
        model = build_model(up_net())
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and all((m.eps, m.momentum) == (1e-3, 0.03) for m in bns)
    # YOLOv5's bias start: objectness log(8 / (640 / s)^2), classes log(0.6 / (80 - 0.99)) above torch's init
    with torch.device("meta"):
        assert model.roi_head.obj_subnet[0].bias.shape == (3,)
    assert math.log(8 / 80 ** 2) < -6


@pytest.mark.parametrize("edit, where, message", [
    (lambda n: n[0]["kwargs"].update(focus_type="v4_focus"), "net[0].kwargs.focus_type", "only 'v5_focus'"),
    (lambda n: n[0]["kwargs"].update(csp1_block_nums=[1, 3, 3]), "net[0].kwargs.csp1_block_nums", "four integers"),
    (lambda n: n[0]["kwargs"].update(init_planes=30), "net[0].kwargs.init_planes", "a multiple of 8"),
    (lambda n: n[1]["kwargs"].update(num_outs=4), "net[1].kwargs.num_outs", "only 3"),
    (lambda n: n[1]["kwargs"].update(normalize={"type": "gn"}), "net[1].kwargs.normalize.type", "use solo_bn"),
    (lambda n: n[2]["kwargs"].update(num_classes=2), "net[2].kwargs.num_classes", "one-class mode"),
    (lambda n: n[3]["kwargs"]["cfg"]["box_loss"]["kwargs"].update(loss_type="giou"),
     "net[3].kwargs.cfg.box_loss.kwargs.loss_type", "only 'ciou'"),
    (lambda n: n[3]["kwargs"]["cfg"]["anchor_generator"].update(type="hand_craft"),
     "net[3].kwargs.cfg.anchor_generator.type", ""),
    (lambda n: n[3]["kwargs"].update(num_anchors_per_level=2), "net[3].kwargs.num_anchors_per_level", "only 3"),
    (lambda n: n[2]["kwargs"].update(share=True), "net[2].kwargs.share", ""),
    (lambda n: n.__setitem__(1, {**n[1], "type": "YoloxPAFPN"}), "net:", "YOLOv5 is mapped as"),
])
def test_what_does_not_fit_is_one_line_naming_the_kwarg(edit, where, message):
    net = copy.deepcopy(up_net(num_classes=4))
    edit(net)
    with pytest.raises(ConfigError) as err:
        check_up_net(net)
    assert str(err.value).startswith(where) and message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_small_yolov5_learns_digit_scenes():
    """UP's yolov5_small_silu net at init_planes 16 (its depths, anchors, targets, losses and
    predictor as in the file), 11 classes (10 digits + background), 500 AdamW steps of 8 on 128
    64x64 scenes of 1-2 digits, then COCO AP on 16 unseen scenes. Measured: bbox AP 0.159, AP50
    0.406 (158 s at load ~20 on 2 cores, one thread)."""
    from scene_training import digit_scene_metrics

    torch.manual_seed(0)
    metrics = digit_scene_metrics(build_model(up_net(num_classes=11, init_planes=16)), 500, 0.004)
    assert metrics["bbox.AP"] > 0.12 and metrics["bbox.AP50"] > 0.3, metrics
