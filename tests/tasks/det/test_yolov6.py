"""UP's YOLOv6 files (tests/fixtures/up/det/yolov6): EfficientRep + RepPANNeck + Effidehead under
the ATSS RetinaNet's retina_post_iou. The RepVGG blocks fuse into single convolutions with the
same outputs; the nets have UP's sizes (hand-counted against the published YOLOv6 v1.0 models);
UP's parameter names are the model's; a small net learns digit scenes."""
import copy
import os

import pytest
import torch
import yaml

from up_trainer.errors import ConfigError
from up_trainer.tasks.det.yolov6 import ConvBnAct, EfficientRep, Effidehead, RepPANNeck, RepVGGBlock, \
    fuse_rep_blocks
from up_trainer.tasks.net import build_model
from up_trainer.tasks.up_nets import check_up_net
from conftest import UP_FIXTURES  # noqa: E402

V6 = os.path.join(UP_FIXTURES, "det", "yolov6")


def up_net(size, aug="", num_classes=None, width=None):
    """UP's net list; ``width``: a smaller width_multiple for fast tests (the file's otherwise)."""
    with open(os.path.join(V6, f"yolox_v6{size}_ret_a2_comloc_400e_640x640{aug}.yaml"), encoding="utf-8") as f:
        net = yaml.safe_load(f)["net"]
    if num_classes is not None:
        for entry in net[2:]:
            entry["kwargs"]["num_classes"] = num_classes
    if width is not None:
        for entry in net[:2]:
            entry["kwargs"]["width_multiple"] = width
    return net


def n_params(module):
    return sum(p.numel() for p in module.parameters())


def _random_bn_stats(model):
    """BatchNorms with statistics and affines far from their start, so fusing has work to do."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=g) * 0.5)
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=g) * 0.2)


# -- re-parameterisation ---------------------------------------------------------------------------
@pytest.mark.parametrize("cin, cout, stride", [(8, 8, 1), (8, 16, 1), (8, 16, 2)])
def test_repvgg_block_fuses_to_one_conv_with_equal_outputs(cin, cout, stride):
    torch.manual_seed(0)
    block = RepVGGBlock(cin, cout, stride)
    _random_bn_stats(block)
    block.eval()
    x = torch.randn(2, cin, 9, 11)
    with torch.no_grad():
        before = block(x)
        block.fuse_branches()
        after = block(x)
    assert block.rbr_dense is None and block.rbr_1x1 is None and block.rbr_identity is None
    assert isinstance(block.rbr_reparam, torch.nn.Conv2d) and block.rbr_reparam.stride == (stride, stride)
    assert torch.allclose(before, after, rtol=1e-5, atol=1e-5), (before - after).abs().max()


def test_whole_net_fused_predicts_the_same_and_load_model_returns_the_fused_form(tmp_path):
    """Outputs equal before and after fusing every block, to float tolerance; predict and export
    load the model through predict.load_model, which fuses."""
    from up_trainer.predict import load_model

    torch.manual_seed(0)
    net = up_net("n", num_classes=3, width=0.125)
    model = build_model(net)
    _random_bn_stats(model)
    model.eval()
    images = [torch.rand(3, 64, 64), torch.rand(3, 64, 96)]
    with torch.no_grad():
        feats = model.features(model.batch_images(images)[0])
        heads = model.roi_head(feats)
        fused = fuse_rep_blocks(model)
        heads_fused = model.roi_head(model.features(model.batch_images(images)[0]))
    assert fused == sum(isinstance(m, RepVGGBlock) for m in model.modules()) > 0
    for a, b in zip(heads, heads_fused):
        for x, y in zip(a, b):
            assert torch.allclose(x, y, rtol=1e-4, atol=1e-4), (x - y).abs().max()
    # through load_model (predict, export): the checkpoint's unfused weights, fused on load
    torch.manual_seed(0)
    trained = build_model(net)
    _random_bn_stats(trained)
    torch.save({"model": trained.state_dict()}, tmp_path / "ckpt.pth")
    cfg = {"runtime": {"imports": []}, "net": net}
    loaded = load_model(cfg, str(tmp_path / "ckpt.pth"), "cpu", use_ema=False)
    blocks = [m for m in loaded.modules() if isinstance(m, RepVGGBlock)]
    assert blocks and all(b.rbr_reparam is not None and b.rbr_dense is None for b in blocks)
    trained.eval()
    with torch.no_grad():
        x = trained.batch_images(images)[0]
        want, got = trained.roi_head(trained.features(x)), loaded.roi_head(loaded.features(x))
    for a, b in zip(want, got):
        for x, y in zip(a, b):
            assert torch.allclose(x, y, rtol=1e-4, atol=1e-4), (x - y).abs().max()


# -- sizes -----------------------------------------------------------------------------------------
def deploy_count(model):
    """Parameters of the deploy form YOLOv6 counts: RepVGG blocks fused, and each conv-BN folded
    into a conv with bias (the BN's weight and bias become one bias per channel)."""
    fuse_rep_blocks(model)
    n = sum(n_params(getattr(model, part)) for part in ("backbone", "neck", "roi_head"))
    return n - sum(m.bn.num_features for m in model.modules() if isinstance(m, ConvBnAct))


# UP's n / t / s files: (parameters as trained, deploy form, head channels per level). The published
# YOLOv6 v1.0 models (one prediction per point, 80 classes) have 4.3M / 15.0M / 17.2M parameters in
# the deploy form; UP's files put 2 anchors on each point, which adds per level the 1x1 prediction
# convs' 80 class + 4 box + 1 IoU outputs over the level's channels + bias. (YOLOv6 v2.0's
# 4.7M / 15.0M / 18.5M are another network: its neck and head changed.)
SIZES = {"n": (4_757_054, 4_336_734, (32, 64, 128)), "t": (16_401_918, 15_009_278, (64, 128, 256)),
         "s": (18_907_774, 17_259_198, (64, 128, 256))}
PUBLISHED_V1 = {"n": 4.3e6, "t": 15.0e6, "s": 17.2e6}


@pytest.mark.parametrize("size", "nts")
def test_parameter_counts_against_published_yolov6(size):
    trained, deploy, channels = SIZES[size]
    with torch.device("meta"):
        model = build_model(up_net(size))
    assert isinstance(model.backbone, EfficientRep) and isinstance(model.neck, RepPANNeck)
    assert isinstance(model.roi_head, Effidehead) and model.roi_head.num_point == 2 and model.num_classes == 80
    assert list(model.neck.out_channels) == list(channels) and model.strides == [8, 16, 32]
    assert n_params(model) == trained
    assert deploy_count(model.eval()) == deploy
    extra_anchor = sum((80 + 4 + 1) * (c + 1) for c in channels)  # the second anchor per point
    assert round((deploy - extra_anchor) / 1e5) * 1e5 == PUBLISHED_V1[size]


def test_up_names_are_the_models_own():
    """UP's module names (ERBlock_*, rbr_dense, Rep_p4, reduce_layer0, cls_preds, ...): a UP
    state dict loads as it is; other entry names are renamed to the model's."""
    with torch.device("meta"):
        model = build_model(up_net("n"))
    keys = set(model.state_dict())
    for key in ("backbone.stem.rbr_dense.conv.weight", "backbone.ERBlock_2.1.conv1.rbr_1x1.bn.running_var",
                "backbone.ERBlock_3.1.block.0.rbr_identity.weight", "backbone.ERBlock_5.2.cv2.conv.weight",
                "neck.Rep_p4.conv1.rbr_dense.conv.weight", "neck.upsample0.upsample_transpose.bias",
                "neck.reduce_layer1.bn.weight", "roi_head.stems.2.bn.bias", "roi_head.cls_preds.0.bias",
                "roi_head.obj_preds.2.weight"):
        assert key in keys, key
    named = up_net("n")
    for entry, name in zip(named, ("trunk", "pan", "dethead")):
        entry["name"] = name
    named[1]["prev"], named[2]["prev"], named[3]["prev"] = "trunk", "pan", "dethead"
    with torch.device("meta"):
        other = build_model(named)
    up_state = {k.replace("backbone.", "trunk.", 1).replace("neck.", "pan.", 1).replace("roi_head.", "dethead.", 1): v
                for k, v in model.state_dict().items()}
    assert set(other.translate_up_weights(up_state)) == keys


@pytest.mark.parametrize("edit, where, message", [
    (lambda n: n[2]["kwargs"].update(anchors=1), "net[2].kwargs.anchors", "1 but anchor_ratios x anchor_scales give 2"),
    (lambda n: n[2]["kwargs"].update(anchors=[10, 13, 16, 30]), "net[2].kwargs.anchors", "expected an integer"),
    (lambda n: n[1]["kwargs"].update(width_multiple=0.5), "net[1].kwargs.width_multiple", "differs from the backbone"),
    (lambda n: n[0]["kwargs"].update(out_layers=[1, 2, 3]), "net[0].kwargs.out_layers", "only [2, 3, 4]"),
    (lambda n: n[0]["kwargs"].update(backbone_base_repeats=[1, 6]), "net[0].kwargs.backbone_base_repeats",
     "expected 5 integers"),
    (lambda n: n[0]["kwargs"].update(act_fn={"type": "GELU"}), "net[0].kwargs.act_fn.type", "not mapped for YOLOv6"),
    (lambda n: n[2]["kwargs"].update(normalize={"type": "gn", "kwargs": {"num_groups": 8}}),
     "net[2].kwargs.normalize.type", "BatchNorm2d"),
    (lambda n: n[2]["kwargs"].update(class_activation="softmax"), "net[2].kwargs.class_activation", "sigmoid"),
    (lambda n: n[3].update(type="retina_post"), "net[3].type", "retina_post with a head with an IoU branch"),
    (lambda n: n[2]["kwargs"].update(depthwise=True), "net[2].kwargs.depthwise", ""),
])
def test_what_does_not_fit_is_one_line_naming_the_kwarg(edit, where, message):
    net = copy.deepcopy(up_net("n", num_classes=3))
    edit(net)
    with pytest.raises(ConfigError) as err:
        check_up_net(net)
    assert str(err.value).startswith(where) and message in str(err.value) and "\n" not in str(err.value)


# -- learning --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_small_yolov6_learns_digit_scenes():
    """UP's v6n net at width_multiple 0.25 (its depth, anchors, post-process and losses as in the
    file), 11 classes (10 digits + background), 300 AdamW steps of 8 on 128 64x64 scenes of 1-2
    digits, then COCO AP on 16 unseen scenes. Measured: bbox AP 0.162, AP50 0.318 (104 s at load
    ~20 on 2 cores, one thread)."""
    from scene_training import digit_scene_metrics

    torch.manual_seed(0)
    model = build_model(up_net("n", num_classes=11, width=0.25))
    metrics = digit_scene_metrics(model, 300, 0.002, before_eval=fuse_rep_blocks)  # evaluated in the deploy form
    assert metrics["bbox.AP"] > 0.12 and metrics["bbox.AP50"] > 0.25, metrics
