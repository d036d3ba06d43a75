"""UP's classification net lists (backbone + base_cls_head + base_cls_postprocess) mapped onto
torchvision: UP's own files check, kwargs are honoured or refused in one line, the losses
follow UP's formulas, and UP-named weights load."""
import glob
import os

import pytest
import torch
import torch.nn.functional as F
import yaml

from up_trainer.errors import ConfigError
from up_trainer.tasks.net import build_model
from up_trainer.tasks.up_nets import check_up_net, is_up_net
from conftest import UP_FIXTURES  # noqa: E402

UP_CLS = os.path.join(UP_FIXTURES, "cls")
# UP files whose net is not mapped, with the start of the one-line refusal.
REFUSED = {}  # (none left: ConvNeXt, CSWin and base_cls_head's representation_size are mapped)
FILES = sorted(os.path.relpath(p, UP_CLS) for p in glob.glob(os.path.join(UP_CLS, "**", "*.yaml"), recursive=True))


def _net(rel):
    with open(os.path.join(UP_CLS, rel)) as f:
        return yaml.safe_load(f)["net"]


def net_list(backbone="resnet18", bkw=None, hkw=None, loss=None, pkw=None):
    return [{"name": "backbone", "type": backbone, "kwargs": {"out_layers": [4], "out_strides": [32], **(bkw or {})}},
            {"name": "head", "type": "base_cls_head", "kwargs": {"num_classes": 5, "in_plane": 512, **(hkw or {})}},
            {"name": "post_process", "type": "base_cls_postprocess",
             "kwargs": {"cls_loss": loss or {"type": "ce"}, **(pkw or {})}}]


@pytest.mark.parametrize("rel", FILES)
def test_every_up_cls_file_checks_or_is_refused_in_one_line(rel):
    net = _net(rel)
    assert is_up_net(net)
    if rel in REFUSED:
        with pytest.raises(ConfigError) as err:
            check_up_net(net)
        assert str(err.value).startswith(REFUSED[rel]) and "\n" not in str(err.value)
    else:
        check_up_net(net)


def test_res18_trains_and_evaluates_with_up_semantics():
    torch.manual_seed(0)
    model = build_model(_net("resnet/res18.yaml"))
    assert [n for n, _ in model.named_children()] == ["backbone", "head", "post_process"]
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([3, 7])
    out = model.train()({"image": x, "label": y})
    assert out["logits"].shape == (2, 1000)
    # label_smooth_ce with ratio e over K classes: 1 - e + e/K on the label, e/K elsewhere
    target = torch.full((2, 1000), 0.1 / 1000)
    target[torch.arange(2), y] = 1 - 0.1 + 0.1 / 1000
    want = -(F.log_softmax(out["logits"], 1) * target).sum() / 2
    assert torch.allclose(out["loss"], want, atol=1e-5)
    ev = model.eval()({"image": x})
    assert set(ev) == {"logits", "scores", "preds"} and ev["preds"].shape == (2,)


def test_soft_labels_follow_up_label_smooth_rule():
    model = build_model(net_list(loss={"type": "label_smooth_ce", "kwargs": {"smooth_ratio": 0.2, "num_classes": 5}}))
    soft = torch.tensor([[0.7, 0.3, 0, 0, 0], [0, 0, 1.0, 0, 0]])
    out = model.train()({"image": torch.randn(2, 3, 32, 32), "label": soft})
    target = soft * (1 - 0.2 + 0.04)
    target[soft == 0] = 0.04
    want = -(F.log_softmax(out["logits"], 1) * target).sum() / 2
    assert torch.allclose(out["loss"], want, atol=1e-6)


def test_bce_hard_and_soft_with_bias():
    model = build_model(net_list(loss={"type": "bce", "kwargs": {"bias": True, "loss_weight": 2.0}}))
    x = torch.randn(2, 3, 32, 32)
    hard = model.train()({"image": x, "label": torch.tensor([1, 4])})
    onehot = F.one_hot(torch.tensor([1, 4]), 5).float()
    assert torch.allclose(hard["loss"], 2 * F.binary_cross_entropy_with_logits(hard["logits"], onehot), atol=1e-6)
    soft = model({"image": x, "label": onehot * 0.5})
    want = 2 * 5 * F.binary_cross_entropy_with_logits(soft["logits"] - torch.log(torch.tensor(5.0)), onehot * 0.5)
    assert torch.allclose(soft["loss"], want, atol=1e-6)


def test_frozen_layers_and_freeze_bn():
    model = build_model(net_list(bkw={"frozen_layers": [0, 1], "normalize": {"type": "freeze_bn"}}))
    bb = model.backbone
    assert not any(p.requires_grad for p in bb.conv1.parameters())
    assert not any(p.requires_grad for p in bb.layer1.parameters())
    assert all(p.requires_grad for p in bb.layer2.parameters())
    model.train()
    assert not bb.layer1.training and bb.layer2.training
    before = bb.layer3[0].bn1.running_mean.clone()
    model({"image": torch.randn(2, 3, 32, 32), "label": torch.tensor([0, 1])})
    assert torch.equal(before, bb.layer3[0].bn1.running_mean)  # freeze_bn: statistics fixed ...
    assert bb.layer3[0].bn1.weight.requires_grad  # ... affine still learns (UP's freeze_bn)


def test_multi_head_dropout_and_group_norm():
    model = build_model(net_list(bkw={"normalize": {"type": "gn", "kwargs": {"num_groups": 8}}},
                                 hkw={"num_classes": [3, 4], "dropout": 0.2}))
    assert isinstance(model.backbone.layer1[0].bn1, torch.nn.GroupNorm)
    assert model.head.drop.p == 0.2 and len(model.head.classifier) == 2
    out = model.train()({"image": torch.randn(2, 3, 32, 32), "label": torch.tensor([[0, 3], [2, 1]])})
    assert set(out) == {"logits", "loss_head0", "loss_head1"}
    assert torch.allclose(out["loss_head1"], F.cross_entropy(out["logits"][1], torch.tensor([3, 1])))
    from up_trainer.errors import DataError

    with pytest.raises(DataError, match=r"net\[1\].kwargs.num_classes: 2 classifier heads .* need 2 labels per "
                                        r"image; the batch's labels have shape \(2,\)"):
        model({"image": torch.randn(2, 3, 32, 32), "label": torch.tensor([0, 1])})


@pytest.mark.parametrize("bad, message", [
    ({"bkw": {"style": "caffe"}}, "net[0].kwargs.style: 'caffe' is not supported for UP's resnet18; only 'pytorch'"),
    ({"bkw": {"out_strides": [16]}}, "net[0].kwargs.out_strides: [16]: the strides follow from out_layers: [32]"),
    ({"bkw": {"frozen_layer": [0]}}, "net[0].kwargs.frozen_layer: UP kwarg not supported by our resnet18 (did you "
                                     "mean 'frozen_layers'"),
    ({"bkw": {"normalize": {"type": "task_solo_bn"}}}, "net[0].kwargs.normalize.type: UP norm 'task_solo_bn' is "
                                                       "not mapped"),
    ({"hkw": {"in_plane": 2048}}, "net[1].kwargs.in_plane: 2048 but the backbone's feature -1 has 512 channels"),
    ({"loss": {"type": "stce"}}, "net[2].kwargs.cls_loss.type: UP classification loss 'stce' is not"),
    ({"loss": {"type": "label_smooth_ce", "kwargs": {"smooth_ratio": 0.1, "num_classes": 10}}},
     "net[2].kwargs.cls_loss.kwargs.num_classes: 10 but the head has 5 classes"),
])
def test_kwargs_not_honoured_are_named_in_one_line(bad, message):
    with pytest.raises(ConfigError) as err:
        check_up_net(net_list(**bad))
    assert str(err.value).startswith(message), str(err.value)


def test_unmapped_combinations_and_entry_keys():
    net = net_list()
    net[1]["prev"] = "nothing"
    with pytest.raises(ConfigError, match=r"net\[1\].prev: 'nothing' names no earlier entry"):
        check_up_net(net)
    net = net_list()
    net[0]["wrappers"] = [{"type": "quant"}]
    with pytest.raises(ConfigError, match=r"net\[0\].wrappers: UP's module wrappers"):
        check_up_net(net)
    with pytest.raises(ConfigError, match=r"^net: the UP parts resnet18 \+ base_cls_head do not form a mapped net"):
        check_up_net(net_list()[:2])
    with pytest.raises(ConfigError, match=r"net\[1\].type: CondinstHead is UP's CondInst instance-mask head.*"
                                          r"instead: no instance segmentation"):
        build_model([{"name": "backbone", "type": "resnet18"}, {"name": "roi_head", "type": "CondinstHead"}])


def test_swin_large_384_builds_from_torchvision_swin_class():
    net = _net("swin/swin_transformer_large_384.yaml")
    with torch.device("meta"):
        model = build_model(net)
    blocks = model.backbone.features
    assert blocks[1][0].attn.num_heads == 6 and blocks[7][0].attn.num_heads == 48
    assert list(blocks[5][0].attn.window_size) == [12, 12] and len(blocks[5]) == 18
    assert model.head.classifier.in_features == 1536


# -- UP-named weights ---------------------------------------------------------------------------
BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


def _bn(prefix):
    return [f"{prefix}.{k}" for k in BN]


def up_resnet18_names():
    """Parameter names of UP's resnet18 as its source builds them: the stem is
    ``layer0 = Sequential(conv, bn, relu, maxpool)``; blocks name their norms bn1/bn2."""
    names = ["layer0.0.weight"] + _bn("layer0.1")
    for layer in range(1, 5):
        for block in range(2):
            p = f"layer{layer}.{block}"
            names += [f"{p}.conv1.weight", *_bn(f"{p}.bn1"), f"{p}.conv2.weight", *_bn(f"{p}.bn2")]
            if block == 0 and layer > 1:
                names += [f"{p}.downsample.0.weight", *_bn(f"{p}.downsample.1")]
    return names


def up_mobilenetv2_names():
    """UP's MobileNetV2: features.0 = conv_bn stem, 17 inverted residuals whose ``conv`` is
    Sequential(1x1, bn, relu6, 3x3 dw, bn, relu6, 1x1, bn) (the expansion conv even at ratio 1),
    features.18 = 1x1 conv_bn."""
    names = ["features.0.0.weight"] + _bn("features.0.1")
    for i in range(1, 18):
        for conv, bn in ((0, 1), (3, 4), (6, 7)):
            names += [f"features.{i}.conv.{conv}.weight", *_bn(f"features.{i}.conv.{bn}")]
    return names + ["features.18.0.weight"] + _bn("features.18.1")


def up_regnet_names(depths, se):
    """UP's RegNet: stem.{conv,bn}; stage s{i} blocks b{j} with proj/bn on the first, and the
    bottleneck f.{a,a_bn,b,b_bn,[se.f_ex.0/2],c,c_bn}."""
    names = ["stem.conv.weight"] + _bn("stem.bn")
    for i, d in enumerate(depths, 1):
        for j in range(1, d + 1):
            p = f"s{i}.b{j}"
            if j == 1:
                names += [f"{p}.proj.weight", *_bn(f"{p}.bn")]
            for part in ("a", "b"):
                names += [f"{p}.f.{part}.weight", *_bn(f"{p}.f.{part}_bn")]
            if se:
                names += [f"{p}.f.se.f_ex.{k}.{t}" for k in (0, 2) for t in ("weight", "bias")]
            names += [f"{p}.f.c.weight", *_bn(f"{p}.f.c_bn")]
    return names


def up_swin_names(depths):
    """UP's (the reference) Swin: patch_embed.{proj,norm}; layers.i.blocks.j.{norm1, attn.{qkv,
    proj,relative_position_bias_table}, norm2, mlp.{fc1,fc2}}; layers.i.downsample.{norm,
    reduction}; one output norm per stage norm0..3."""
    names = [f"patch_embed.{m}.{t}" for m in ("proj", "norm") for t in ("weight", "bias")]
    for i, d in enumerate(depths):
        for j in range(d):
            p = f"layers.{i}.blocks.{j}"
            names += [f"{p}.attn.relative_position_bias_table"]
            names += [f"{p}.{m}.{t}" for m in ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2")
                      for t in ("weight", "bias")]
        if i < len(depths) - 1:
            names += [f"layers.{i}.downsample.reduction.weight", f"layers.{i}.downsample.norm.weight",
                      f"layers.{i}.downsample.norm.bias"]
    return names + [f"norm{i}.{t}" for i in range(4) for t in ("weight", "bias")]


@pytest.mark.parametrize("backbone, bkw, in_plane, up_names", [
    ("resnet18", {}, 512, up_resnet18_names),
    ("mobilenetv2", {"width_mult": 0.5}, 1280, up_mobilenetv2_names),
    ("regnetx_200m", {}, 368, lambda: up_regnet_names([1, 1, 4, 7], se=False)),
    ("regnety_200m", {}, 368, lambda: up_regnet_names([1, 1, 4, 7], se=True)),
    ("swin_tiny", None, 768, lambda: up_swin_names([2, 2, 6, 2])),
])
def test_up_checkpoint_names_load_into_the_mapped_net(tmp_path, backbone, bkw, in_plane, up_names):
    from up_trainer.engine.builder import load_pretrained

    net = net_list(backbone, bkw, {"in_plane": in_plane})
    if bkw is None:
        net[0]["kwargs"] = {}
    if backbone == "mobilenetv2":
        net[0]["kwargs"].pop("out_layers")
    model = build_model(net)
    own = model.state_dict()
    names = [f"backbone.{n}" for n in up_names()] + ["head.classifier.weight", "head.classifier.bias"]
    translated = model.translate_up_weights({n: torch.zeros(1) for n in names})
    assert len(translated) == len(names)
    renamed = {new: old for old, new in zip(names, translated)}
    missing = sorted(set(own) - set(renamed) - {k for k in own if k.endswith("relative_position_index")})
    assert missing == []
    extra = sorted(k for k in renamed if k not in own)
    assert all(k.startswith("backbone.norm") and k[len("backbone.norm")] in "012" for k in extra), extra
    # A UP-form checkpoint file ({'model': state}, DDP's module. prefix) loads every tensor.
    torch.manual_seed(1)
    state = {f"module.{renamed[k]}": torch.randn_like(v, dtype=torch.float32).to(v.dtype)
             for k, v in own.items() if k in renamed}
    torch.save({"model": state, "epoch": 3}, tmp_path / "up.pth")
    fresh = build_model(net)
    report = load_pretrained(fresh, str(tmp_path / "up.pth"))
    assert report["mismatched"] == [] and report["unexpected"] == []
    for key, value in fresh.state_dict().items():
        if key in renamed:
            assert torch.equal(value, state[f"module.{renamed[key]}"]), key


@pytest.mark.parametrize("backbone, in_plane", [("mobilenetv2", 1280), ("regnetx_400m", 384)])
def test_our_own_names_pass_the_map_unchanged(backbone, in_plane):
    net = net_list(backbone, {}, {"in_plane": in_plane})
    net[0]["kwargs"] = {"out_strides": [32]}  # required by UP's MobileNetV2, the default elsewhere
    model = build_model(net)
    state = model.state_dict()
    assert list(model.translate_up_weights(state)) == list(state)


def test_docs_name_every_refused_up_type():
    from up_trainer.tasks.up_nets.refused import REFUSED

    pages = glob.glob(os.path.join(os.path.dirname(UP_CLS), "..", "..", "..", "docs", "up", "*.rst"))
    text = "".join(open(p, encoding="utf-8").read() for p in pages)
    missing = [t for t in REFUSED if not t.endswith("_") and not t.startswith("Big") and f"``{t}``" not in text]
    assert pages and missing == []


@pytest.mark.parametrize("command", ["config", "train"])
def test_refused_up_file_exits_2_with_one_line_from_config_and_train(tmp_path, command):
    from conftest import invoke

    with open(os.path.join(UP_CLS, "cswin", "cswin_tiny.yaml"), encoding="utf-8") as f:
        text = f.read().replace("type: base_cls_head", "type: fpn_cls_head")  # a UP head refused on purpose
    (tmp_path / "fpn_head.yaml").write_text(text)
    args = [command, "--config", str(tmp_path / "fpn_head.yaml")]
    result = invoke(args + (["--work-dir", tmp_path / "run"] if command == "train" else []))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("up: error: net[1].type: fpn_cls_head is UP's classification head")
