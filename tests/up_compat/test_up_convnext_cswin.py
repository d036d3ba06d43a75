"""UP's ConvNeXt (on torchvision's) and CSWin (built on torch) backbones, UP's convnext_head and
base_cls_head's representation_size: parameter counts against the published models, UP-named
weights loading, CSWin's stripe attention, and a narrow ConvNeXt and CSWin learning the digits."""
import os

import pytest
import torch
import torch.nn.functional as F
import yaml

from conftest import UP_FIXTURES
from up_trainer.errors import ConfigError
from up_trainer.tasks.up_nets import build_up_net, check_up_net
from up_trainer.tasks.up_nets.cls import UPClassifier, build_postprocess
from up_trainer.tasks.up_nets.convnext import ConvNeXtHead, convnext_trunk
from up_trainer.tasks.up_nets.cswin import CSWINS, CSWinTransformer, LePEAttention
from up_trainer.tasks.up_nets.options import Options


def up_net(rel):
    with open(os.path.join(UP_FIXTURES, "cls", rel), encoding="utf-8") as f:
        return yaml.safe_load(f)["net"]


def n_params(module):
    return sum(p.numel() for p in module.parameters())


def meta_net(net):
    with torch.device("meta"):
        return build_up_net(net)


def test_convnext_counts_are_torchvisions_and_the_published_ones():
    import torchvision

    for rel, tv, published in (("convnext/convnext_t.yaml", torchvision.models.convnext_tiny, 28.6e6),
                               ("convnext/convnext_s.yaml", torchvision.models.convnext_small, 50.2e6)):
        ours = n_params(meta_net(up_net(rel)))
        with torch.device("meta"):
            assert ours == n_params(tv())  # the same blocks, head (LayerNorm + 768 x 1000 Linear) included
        assert abs(ours - published) < 0.05e6, (rel, ours)


def cswin_hand_count(embed, depths, heads, head_norm, num_classes=1000):
    """CSWin's parameters counted from its parts: a block of width C has norm1/norm2 (2C each),
    qkv (3C^2 + 3C), proj (C^2 + C), the MLP (8C^2 + 5C) and one depthwise 3x3 get_v per
    branch over all C channels together (9C + C); the stem conv 7x7 (49*3*E + E) + LayerNorm,
    three merges (3x3 conv C -> 2C + LayerNorm 2C), UP's four output norms, and the head
    (convnext_head: a LayerNorm before the classifier)."""
    total = 49 * 3 * embed + embed + 2 * embed
    for i, depth in enumerate(depths):
        c = embed * 2 ** i
        total += depth * (4 * c + 3 * c * c + 3 * c + c * c + c + 8 * c * c + 5 * c + 10 * c)
        total += 2 * c  # norm{i}
        if i < 3:
            total += 9 * c * 2 * c + 2 * c + 2 * 2 * c
    return total + 8 * embed * num_classes + num_classes + (2 * 8 * embed if head_norm else 0)


@pytest.mark.parametrize("rel, arch, published", [
    ("cswin/cswin_tiny.yaml", "CSWin_64_12211_tiny_224", 23e6),
    ("cswin/cswin_small.yaml", "CSWin_64_24322_small_224", 35e6),
    ("cswin/cswin_base.yaml", "CSWin_96_24322_base_224", 78e6),
])
def test_cswin_count_matches_the_hand_count_and_the_published_figure(rel, arch, published):
    ours = n_params(meta_net(up_net(rel)))
    assert ours == cswin_hand_count(*CSWINS[arch], head_norm=up_net(rel)[1]["type"] == "convnext_head")
    # The paper rounds (CSWin-T 22.32M is listed as 23M); within 3% of the published figure.
    assert abs(ours - published) / published < 0.03, ours


def test_cswin_stripes_attend_within_their_stripe_only():
    """Vertical stripes one column wide (UP's stage-1 split 1, idx 0): changing the tokens of
    one column changes that column's output only (attention and LePE both stay inside)."""
    torch.manual_seed(0)
    attn = LePEAttention(4, idx=0, split_size=1, num_heads=2, attn_drop=0.0)
    h, w = 3, 5
    q, k, v = (torch.randn(1, h * w, 4) for _ in range(3))
    base = attn(q, k, v, h, w).view(h, w, 4)
    v2 = v.clone().view(h, w, 4)
    v2[:, 3] += 1.0
    moved = attn(q, k, v2.view(1, h * w, 4), h, w).view(h, w, 4)
    changed = (moved - base).abs().sum(dim=(0, 2)) > 1e-6
    assert changed.tolist() == [False, False, False, True, False]


def test_narrow_cswin_runs_on_sizes_the_stripes_do_not_divide():
    torch.manual_seed(0)
    net = CSWinTransformer(16, [1, 1, 1, 1], [2, 2, 2, 2], drop_path_rate=0.1)
    for size in (32, 40):
        outs = net(torch.randn(1, 3, size, size))
        assert [tuple(o.shape[1:]) for o in outs] == [(16 * 2 ** i, -(-size // 2 ** (i + 2)), -(-size // 2 ** (i + 2)))
                                                      for i in range(4)]
    sum(o.mean() for o in outs).backward()
    assert all(p.grad is not None for p in net.parameters())
    names = {k for k, _ in net.named_parameters()}  # UP's module names, so UP weights load unchanged
    assert {"stage1_conv.weight", "stage1.0.attns.1.get_v.weight", "stage4.0.attns.0.get_v.weight",
            "merge3.conv.weight", "norm3.bias", "stage2.0.mlp.fc2.weight"} <= names


def up_convnext_state(model):
    """The narrow ConvNeXt's state under UP's names (UP's module layout written out by hand)."""
    ours = model.state_dict()
    state = {}
    for i in range(4):
        for idx in (0, 1):  # UP's stem: conv, LN; a downsample: LN, conv (torchvision's order too)
            for p in ("weight", "bias"):
                state[f"backbone.downsample_layers.{i}.{idx}.{p}"] = ours[f"backbone.features.{2 * i}.{idx}.{p}"]
        for j in range(len(model.backbone.features[2 * i + 1])):
            pre = f"backbone.features.{2 * i + 1}.{j}"
            for up, tv in (("dwconv", "block.0"), ("norm", "block.2"), ("pwconv1", "block.3"), ("pwconv2", "block.5")):
                for p in ("weight", "bias"):
                    state[f"backbone.stages.{i}.{j}.{up}.{p}"] = ours[f"{pre}.{tv}.{p}"]
            state[f"backbone.stages.{i}.{j}.gamma"] = ours[f"{pre}.layer_scale"].flatten()  # UP's shape: C
    for k in ("head.layer_norm.weight", "head.layer_norm.bias", "head.classifier.weight", "head.classifier.bias"):
        state[k] = ours[k]
    return state


def narrow_convnext(num_classes=10, dims=(16, 32, 64, 128)):
    trunk = convnext_trunk([1, 1, 1, 1], list(dims), drop_path_rate=0.0, layer_scale=1e-6)
    post = build_postprocess(Options({"cls_loss": {"type": "ce"}}, "net[2].kwargs", "post"), num_classes)
    model = UPClassifier([("backbone", trunk), ("head", ConvNeXtHead(dims[-1], num_classes)), ("post_process", post)],
                         num_classes)
    model.up_backbone_type = "convnext_tiny"
    return model


def test_up_named_convnext_weights_load_through_the_name_map():
    torch.manual_seed(0)
    source = narrow_convnext()
    with torch.no_grad():
        for p in source.parameters():
            p.normal_()
    up_state = up_convnext_state(source)
    target = narrow_convnext()
    translated = target.translate_up_weights(up_state)
    target.load_state_dict(translated, strict=True)
    x = torch.randn(2, 3, 32, 32)
    source.eval(), target.eval()
    assert torch.equal(source({"image": x})["logits"], target({"image": x})["logits"])


def test_convnext_kwargs_honoured_or_refused_in_one_line():
    net = up_net("convnext/convnext_t.yaml")
    net[0]["kwargs"].update(act_func="relu", out_layers=[2, 3], out_strides=[16, 32])
    model = meta_net(net)
    assert model.backbone.out_planes == [384, 768]
    assert isinstance(model.backbone.features[1][0].block[4], torch.nn.ReLU)
    for key, value, message in (("layer_scale_init_value", 0.0, "must be > 0"), ("pretrained", True, "pretrain_model"),
                                ("depths", [1, 1, 1, 1], "UP kwarg not supported"),
                                ("out_strides", [8], "the strides follow from out_layers")):
        bad = up_net("convnext/convnext_t.yaml")
        bad[0]["kwargs"][key] = value
        with pytest.raises(ConfigError) as err:
            check_up_net(bad)
        assert f"net[0].kwargs.{key}" in str(err.value) and message in str(err.value)
    bad = up_net("convnext/convnext_t.yaml")
    bad[1]["kwargs"]["head_init_scale"] = "big"
    with pytest.raises(ConfigError, match=r"net\[1\]\.kwargs\.head_init_scale: expected a number"):
        check_up_net(bad)


def test_convnext_head_scales_its_initial_classifier():
    torch.manual_seed(0)
    one = ConvNeXtHead(8, 3, head_init_scale=1.0)
    torch.manual_seed(0)
    tenth = ConvNeXtHead(8, 3, head_init_scale=0.1)
    assert torch.allclose(tenth.classifier.weight, one.classifier.weight * 0.1)


def test_representation_size_is_a_tanh_pre_logits_layer():
    net = up_net("resnet/res50_strikes_100e_bce.yaml")
    model = meta_net(net)
    head = model.head
    assert tuple(head.pre_logits.weight.shape) == (768, 2048) and tuple(head.classifier.weight.shape) == (1000, 768)
    torch.manual_seed(0)
    small = build_up_net([
        {"name": "backbone", "type": "resnet18", "kwargs": {"out_layers": [4], "out_strides": [32]}},
        {"name": "head", "type": "base_cls_head", "kwargs": {"num_classes": 4, "in_plane": 512,
                                                             "representation_size": 6}},
        {"name": "post_process", "type": "base_cls_postprocess", "kwargs": {"cls_loss": {"type": "ce"}}}]).eval()
    feats = [torch.randn(2, 512, 1, 1)]
    expected = small.head.classifier(torch.tanh(small.head.pre_logits(feats[0].flatten(1))))
    assert torch.allclose(small.head(feats), expected)


def digits_32px():
    from up_trainer.tasks.cls.datasets import _load_digits, stratified_split

    images, labels = _load_digits()
    x = torch.tensor(images, dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=32, mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)
    y = torch.tensor(labels)
    train, test = stratified_split(labels, 0.2, 0)
    return (x[train], y[train]), (x[test], y[test])


def digits_top1(model, epochs, lr):
    """Top-1 on the held-out 32 px digits after ``epochs`` of AdamW at batch 64 (one thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        (xtr, ytr), (xte, yte) = digits_32px()
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
        for epoch in range(epochs):
            order = torch.randperm(len(xtr))
            model.train()
            for i in range(0, len(order), 64):
                idx = order[i:i + 64]
                loss = model({"image": xtr[idx], "label": ytr[idx]})["loss"]
                opt.zero_grad()
                loss.backward()
                opt.step()
        model.eval()
        with torch.no_grad():
            return (model({"image": xte})["preds"] == yte).float().mean().item()
    finally:
        torch.set_num_threads(threads)


def test_narrow_convnext_with_its_head_learns_the_digits():
    """ConvNeXt blocks (dims 16-128, one block per stage) + convnext_head on 32 px digits:
    three epochs of AdamW reach well above chance (10%)."""
    torch.manual_seed(0)
    acc = digits_top1(narrow_convnext(), 3, 4e-3)
    print(f"narrow ConvNeXt, 3 epochs, digits test top1: {acc:.3f}")
    assert acc > 0.8


def test_narrow_cswin_with_convnext_head_learns_the_digits():
    """CSWin blocks (embed 16, one block per stage, stripes of 2) + convnext_head, as UP's
    cswin_small/base files pair them, on 32 px digits: 96.9 % top-1 after 4 epochs (5 s on an
    idle 2-core box), chance is 10 %."""
    torch.manual_seed(0)
    trunk = CSWinTransformer(16, [1, 1, 1, 1], [2, 2, 2, 2], img_size=32)
    post = build_postprocess(Options({"cls_loss": {"type": "ce"}}, "net[2].kwargs", "post"), 10)
    model = UPClassifier([("backbone", trunk), ("head", ConvNeXtHead(128, 10)), ("post_process", post)], 10)
    acc = digits_top1(model, 4, 2e-3)
    print(f"narrow CSWin, 4 epochs, digits test top1: {acc:.3f}")
    assert acc > 0.9
