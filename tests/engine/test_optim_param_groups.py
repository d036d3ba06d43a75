"""Optimizer param groups: paramwise_cfg (norm/bias no-decay, custom_keys), UP pconfig,
frozen parameters, layer-wise LR decay for ResNet / ConvNeXt / ViT."""
import pytest
import torch
from torch import nn
from torchvision.models import ResNet, VisionTransformer, resnet18
from torchvision.models.convnext import CNBlockConfig, ConvNeXt

from up_trainer.engine.optim import build_optimizer
from up_trainer.errors import ConfigError


class Wrapped(nn.Module):
    """Our models wrap the torchvision net as ``backbone``."""

    def __init__(self, net):
        super().__init__()
        self.backbone = net

    def forward(self, x):
        return self.backbone(x)


def small_net():
    return Wrapped(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 4, 3, groups=4),
                                 nn.LayerNorm(4), nn.Identity(), nn.Linear(4, 3)))


def settings(opt, model):
    """{param name: (lr, weight_decay)} as the optimizer will use them."""
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for g in opt.param_groups:
        for p in g["params"]:
            out[names[id(p)]] = (g["lr"], g["weight_decay"])
    return out


def sgd(model, **extra):
    return build_optimizer(model, {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
                                   **extra})


def test_plain_groups_leave_frozen_parameters_out():
    model = small_net()
    model.backbone[0].weight.requires_grad_(False)
    opt = sgd(model)
    s = settings(opt, model)
    assert "backbone.0.weight" not in s
    assert len(s) == sum(1 for p in model.parameters() if p.requires_grad)
    assert set(s.values()) == {(0.1, 1e-4)}


def test_no_decay_for_norm_and_bias_is_switchable():
    model = small_net()
    on = settings(sgd(model, paramwise_cfg={"no_decay_norm_bias": True}), model)
    assert on["backbone.1.weight"] == (0.1, 0.0)  # BatchNorm
    assert on["backbone.3.weight"] == (0.1, 0.0)  # LayerNorm
    assert on["backbone.0.bias"] == (0.1, 0.0)  # conv bias
    assert on["backbone.5.bias"] == (0.1, 0.0)  # linear bias
    assert on["backbone.0.weight"] == (0.1, 1e-4)
    assert on["backbone.5.weight"] == (0.1, 1e-4)
    off = settings(sgd(model, paramwise_cfg={"no_decay_norm_bias": False}), model)
    assert set(off.values()) == {(0.1, 1e-4)}
    # MMEngine multipliers: explicit values win over the shortcut
    mm = settings(sgd(model, paramwise_cfg={"no_decay_norm_bias": True, "bias_decay_mult": 0.5,
                                             "bias_lr_mult": 2.0, "dwconv_decay_mult": 0.0}), model)
    assert mm["backbone.0.bias"] == pytest.approx((0.2, 5e-5))
    assert mm["backbone.2.weight"] == (0.1, 0.0)  # depth-wise conv
    assert mm["backbone.1.bias"] == (0.1, 0.0)  # a norm bias follows the norm rule


def test_custom_keys_longest_match_wins():
    model = small_net()
    cfg = {"custom_keys": {"backbone": {"lr_mult": 0.1}, "backbone.5": {"lr_mult": 10.0, "decay_mult": 0.0},
                           "backbone.5.bias": {"lr_mult": 3.0}},
           "no_decay_norm_bias": True}
    s = settings(sgd(model, paramwise_cfg=cfg), model)
    assert s["backbone.5.bias"] == pytest.approx((0.3, 1e-4))  # longest key; norm/bias rules skipped
    assert s["backbone.5.weight"] == pytest.approx((1.0, 0.0))
    assert s["backbone.0.weight"] == pytest.approx((0.01, 1e-4))
    assert s["backbone.1.weight"] == pytest.approx((0.01, 1e-4))  # custom key beats the norm rule


def test_groups_are_deterministic_and_train():
    torch.manual_seed(0)
    model = small_net()
    opt = sgd(model, paramwise_cfg={"no_decay_norm_bias": True, "custom_keys": {"backbone.5": {"lr_mult": 2}}})
    opt2 = sgd(small_net(), paramwise_cfg={"no_decay_norm_bias": True, "custom_keys": {"backbone.5": {"lr_mult": 2}}})
    shape = [(len(g["params"]), g["lr"], g["weight_decay"]) for g in opt.param_groups]
    assert shape == [(len(g["params"]), g["lr"], g["weight_decay"]) for g in opt2.param_groups]
    before = model.backbone[5].weight.detach().clone()
    model(torch.randn(2, 1, 8, 8)).sum().backward()
    opt.step()
    assert not torch.equal(before, model.backbone[5].weight)


def test_up_pconfig():
    model = small_net()
    cfg = {"bn_w": {"weight_decay": 0.0}, "ln_b": {"lr": 0.5}, "linear_b": {"weight_decay": 0.0, "lr": 0.2},
           "nodecay": ["backbone.2"]}
    s = settings(sgd(model, pconfig=cfg), model)
    assert s["backbone.1.weight"] == (0.1, 0.0)
    assert s["backbone.1.bias"] == (0.1, 1e-4)  # bn_b not configured: default group
    assert s["backbone.3.bias"] == (0.5, 1e-4)
    assert s["backbone.5.bias"] == (0.2, 0.0)
    assert s["backbone.2.weight"] == (0.1, 0.0)  # nodecay by name


def test_layer_decay_resnet_layer_and_stage_wise():
    model = Wrapped(resnet18(num_classes=4))
    s = settings(sgd(model, paramwise_cfg={"decay_rate": 0.5, "decay_type": "stage_wise"}), model)
    # depths: stem 0, layer1..4 -> 1..4, head (fc) 5 -> factor 0.5 ** (5 - depth)
    assert s["backbone.conv1.weight"][0] == pytest.approx(0.1 * 0.5 ** 5)
    assert s["backbone.layer1.1.conv2.weight"][0] == pytest.approx(0.1 * 0.5 ** 4)
    assert s["backbone.layer4.0.downsample.0.weight"][0] == pytest.approx(0.1 * 0.5 ** 1)
    assert s["backbone.fc.weight"][0] == pytest.approx(0.1)
    s = settings(sgd(model, paramwise_cfg={"decay_rate": 0.9}), model)  # layer_wise: 8 blocks
    assert s["backbone.layer1.0.conv1.weight"][0] == pytest.approx(0.1 * 0.9 ** 8)
    assert s["backbone.layer3.1.bn2.weight"][0] == pytest.approx(0.1 * 0.9 ** 3)
    assert s["backbone.bn1.weight"][0] == pytest.approx(0.1 * 0.9 ** 9)
    # num_layers buckets blocks: 8 blocks into 4 layers
    s = settings(sgd(model, paramwise_cfg={"decay_rate": 0.9, "num_layers": 4}), model)
    assert s["backbone.layer1.1.conv1.weight"][0] == pytest.approx(0.1 * 0.9 ** 4)
    assert s["backbone.layer4.1.conv1.weight"][0] == pytest.approx(0.1 * 0.9 ** 1)
    assert isinstance(model.backbone, ResNet)


def test_layer_decay_convnext_and_vit():
    convnext = Wrapped(ConvNeXt([CNBlockConfig(8, 16, 2), CNBlockConfig(16, None, 1)], num_classes=3))
    s = settings(sgd(convnext, paramwise_cfg={"decay_rate": 0.5}), convnext)
    # blocks in order: features.1.0, features.1.1, features.2 (downsample), features.3.0 -> depths 1..4
    assert s["backbone.features.0.0.weight"][0] == pytest.approx(0.1 * 0.5 ** 5)
    assert s["backbone.features.1.1.block.0.weight"][0] == pytest.approx(0.1 * 0.5 ** 3)
    assert s["backbone.features.2.1.weight"][0] == pytest.approx(0.1 * 0.5 ** 2)
    assert s["backbone.classifier.2.weight"][0] == pytest.approx(0.1)
    s = settings(sgd(convnext, paramwise_cfg={"decay_rate": 0.5, "decay_type": "stage_wise"}), convnext)
    assert s["backbone.features.2.1.weight"][0] == pytest.approx(0.1 * 0.5 ** 1)  # downsample joins stage 2
    assert s["backbone.features.1.0.block.0.weight"][0] == pytest.approx(0.1 * 0.5 ** 2)

    vit = Wrapped(VisionTransformer(image_size=8, patch_size=4, num_layers=3, num_heads=1, hidden_dim=8,
                                    mlp_dim=8, num_classes=3))
    s = settings(sgd(vit, paramwise_cfg={"decay_rate": 0.8, "custom_keys": {"pos_embedding": {"decay_mult": 0}}}), vit)
    assert s["backbone.class_token"][0] == pytest.approx(0.1 * 0.8 ** 4)
    assert s["backbone.encoder.pos_embedding"] == pytest.approx((0.1 * 0.8 ** 4, 0.0))
    assert s["backbone.encoder.layers.encoder_layer_0.mlp.0.weight"][0] == pytest.approx(0.1 * 0.8 ** 3)
    assert s["backbone.encoder.layers.encoder_layer_2.ln_1.weight"][0] == pytest.approx(0.1 * 0.8)
    assert s["backbone.heads.head.weight"][0] == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="no stages"):
        sgd(vit, paramwise_cfg={"decay_rate": 0.8, "decay_type": "stage_wise"})


@pytest.mark.parametrize("extra, match", [
    ({"paramwise_cfg": {"norm_decay": 0}}, r"paramwise_cfg\.norm_decay: unknown key.*norm_decay_mult"),
    ({"paramwise_cfg": {"custom_keys": {"fc": {"lr": 1}}}}, r"custom_keys\.fc\.lr: unknown key"),
    ({"paramwise_cfg": {"decay_rate": 0.5}}, "layer-wise LR decay does not know"),
    ({"paramwise_cfg": {"decay_rate": 1.5}}, r"decay_rate: must be in \(0, 1\]"),
    ({"pconfig": {"bn_weight": {}}}, r"pconfig\.bn_weight: unknown key.*bn_w"),
    ({"pconfig": {"bn_w": {}}, "paramwise_cfg": {"no_decay_norm_bias": True}}, "not both"),
])
def test_config_errors(extra, match):
    with pytest.raises(ConfigError, match=match):
        sgd(small_net(), **extra)


def test_all_frozen_is_an_error():
    model = small_net()
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ConfigError, match="no trainable parameters"):
        sgd(model)


def test_summary_is_logged(caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="up"):
        sgd(small_net(), paramwise_cfg={"no_decay_norm_bias": True})
    text = caplog.text
    assert "optimizer param groups (3; 0 frozen tensors left out)" in text
    assert "] norm " in text and "] bias " in text and "weight_decay=0 " in text


def test_layer_decay_on_a_detector_resnet_trunk():
    from torchvision.models._utils import IntermediateLayerGetter

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = IntermediateLayerGetter(resnet18(), {"layer2": "0", "layer3": "1"})
            self.head = nn.Conv2d(256, 4, 1)

    model = Detector()
    s = settings(sgd(model, paramwise_cfg={"decay_rate": 0.5, "decay_type": "stage_wise"}), model)
    assert s["backbone.conv1.weight"][0] == pytest.approx(0.1 * 0.5 ** 4)  # stages 1..3, head 4
    assert s["backbone.layer3.0.conv1.weight"][0] == pytest.approx(0.1 * 0.5)
    assert s["head.weight"][0] == pytest.approx(0.1)


def up_vit_classifier(depth=3):
    """UP's ViT backbone and vit_head, as a UP file builds them (tiny)."""
    from up_trainer.tasks.net import build_model

    return build_model([
        {"name": "backbone", "type": "deit_tiny_patch16_224",
         "kwargs": {"image_size": 16, "patch_size": 8, "depth": depth, "hidden_dim": 8, "heads": 2, "mlp_dim": 8}},
        {"name": "head", "type": "vit_head", "kwargs": {"num_classes": 3, "in_plane": 8, "cls_type": "avg_pool"}},
        {"name": "post_process", "type": "base_cls_postprocess", "kwargs": {"cls_loss": {"type": "ce"}}}])


def test_up_layer_decay_for_vit_by_hand():
    """UP's pconfig.layer_decay: layer id 0 for the patch embedding / class token / position
    embedding, i + 1 for block i, depth (3) for the rest; lr = base_lr * value ** (3 - id),
    absolute (not times the optimizer's lr); nodecay still zeroes the weight decay."""
    model = up_vit_classifier()
    pconfig = {"nodecay": ["ndim_is1", ".bias"], "layer_decay": {"type": "vit_base", "value": 0.5, "base_lr": 0.02}}
    opt = build_optimizer(model, {"type": "AdamW", "kwargs": {"lr": 0.1, "weight_decay": 0.05}, "pconfig": pconfig})
    s = settings(opt, model)
    assert s["backbone.conv_proj.weight"] == pytest.approx((0.02 * 0.125, 0.05))
    assert s["backbone.conv_proj.bias"] == pytest.approx((0.02 * 0.125, 0.0))
    assert s["backbone.class_token"] == pytest.approx((0.02 * 0.125, 0.05))  # 3-d: decayed, as in UP
    assert s["backbone.encoder.pos_embedding"] == pytest.approx((0.02 * 0.125, 0.05))
    block = "backbone.encoder.layers.encoder_layer_{}."
    assert s[block.format(0) + "self_attention.in_proj_weight"] == pytest.approx((0.02 * 0.25, 0.05))
    assert s[block.format(0) + "ln_1.weight"] == pytest.approx((0.02 * 0.25, 0.0))
    assert s[block.format(1) + "mlp.0.weight"] == pytest.approx((0.02 * 0.5, 0.05))
    assert s[block.format(2) + "mlp.3.weight"] == pytest.approx((0.02, 0.05))  # UP: last block = head
    assert s["backbone.encoder.ln.weight"] == pytest.approx((0.02, 0.0))
    assert s["head.classifier.weight"] == pytest.approx((0.02, 0.05))
    assert s["head.classifier.bias"] == pytest.approx((0.02, 0.0))
    # base_lr defaults to the optimizer's lr; a pconfig entry overrides the layer's lr (UP's order)
    pconfig = {"layer_decay": {"type": "vit_base", "value": 0.5}, "ln_w": {"type": "weight", "kwargs": {"lr": 0.7}}}
    s = settings(build_optimizer(model, {"type": "SGD", "kwargs": {"lr": 0.1}, "pconfig": pconfig}), model)
    assert s[block.format(1) + "mlp.0.bias"][0] == pytest.approx(0.1 * 0.5)
    assert s[block.format(0) + "ln_2.weight"][0] == pytest.approx(0.7)


@pytest.mark.parametrize("layer_decay, match", [
    ({"type": "vit_base", "value": 0.0}, r"layer_decay\.value: must be in \(0, 1\]"),
    ({"type": "vit_base", "value": 1.2}, r"layer_decay\.value: must be in \(0, 1\]"),
    ({"type": "swin", "value": 0.6}, r"layer_decay\.type: UP's layer decay has no type 'swin'"),
    ({"type": "vit_base", "value": 0.6, "base_lr": -1}, r"layer_decay\.base_lr: must be > 0"),
    ({"type": "vit_base", "value": 0.6, "rate": 1}, r"layer_decay\.rate: unknown key"),
])
def test_up_layer_decay_errors(layer_decay, match):
    with pytest.raises(ConfigError, match=match):
        sgd(up_vit_classifier(), pconfig={"layer_decay": layer_decay})
    with pytest.raises(ConfigError, match="needs a ViT backbone"):
        sgd(small_net(), pconfig={"layer_decay": {"type": "vit_base", "value": 0.6}})
