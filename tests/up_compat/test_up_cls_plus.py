"""UP's stronger classification parts, each on small hand-computed cases: ResNet-D, MobileNetV3
(UP's block order), ViT with drop path, norm_linear, softmax_eql with gradient_collector,
RandAugIncre."""
import os

import pytest
import torch
from torch import nn

from up_trainer.errors import ConfigError, UserError
from up_trainer.tasks.up_nets.backbones import build_resnet, pooled_shortcut
from up_trainer.tasks.up_nets.options import Options


def resnet(arch, **kwargs):
    trunk, _ = build_resnet(arch, Options({"normalize": {"type": "solo_bn"}, **kwargs}, "net[0].kwargs", arch))
    return trunk


def n_params(module):
    return sum(p.numel() for p in module.parameters())


# -- ResNet-D ------------------------------------------------------------------------------------
def test_resnet50_d_matches_the_published_parameter_count_and_shapes():
    trunk = resnet("resnet50_D")
    head = 2048 * 1000 + 1000
    assert round((n_params(trunk) + head) / 1e6, 1) == 25.6  # ResNet-50-D, He et al. 2019
    assert n_params(trunk) + head == 25_557_032  # the average pool adds nothing to ResNet-50
    deep = resnet("resnet50_D", deep_stem=True)
    # 7x7x3x64 conv -> 3x3 convs 3->32, 32->32, 32->64 plus two 32-channel norms
    assert n_params(deep) - n_params(trunk) == (27 * 32 + 9 * 32 * 32 + 9 * 32 * 64 + 2 * 64) - 49 * 3 * 64
    assert round((n_params(deep) + head) / 1e6, 1) == 25.6
    with torch.no_grad():
        out = deep.eval()(torch.randn(1, 3, 64, 48))
    assert [o.shape for o in out] == [(1, 2048, 2, 2)]
    for i, stride in ((1, 1), (2, 2), (3, 2), (4, 2)):
        down = getattr(trunk, f"layer{i}")[0].downsample
        assert [type(m) for m in down] == [nn.ZeroPad2d, nn.AvgPool2d, nn.Conv2d, nn.BatchNorm2d]
        assert down[1].stride == stride and down[2].stride == (1, 1)
        assert torch.equal(down[3].weight, torch.zeros_like(down[3].weight))  # UP zeroes them without initializer


def test_up_d_shortcut_pads_top_left_and_counts_the_zeros():
    conv = nn.Conv2d(1, 1, 1, stride=2, bias=False)
    nn.init.ones_(conv.weight)
    down = pooled_shortcut(nn.Sequential(conv, nn.Identity()), 2, up_d=True)
    x = torch.arange(16.0).view(1, 1, 4, 4)
    # windows start one pixel up/left: [pad, pad; pad, x00], [pad, pad; x01, x02], ...
    want = torch.tensor([[0 / 4, (1 + 2) / 4], [(4 + 8) / 4, (5 + 6 + 9 + 10) / 4]])
    assert torch.allclose(down(x)[0, 0], want)
    avg = pooled_shortcut(nn.Sequential(nn.Conv2d(1, 1, 1, stride=2, bias=False), nn.Identity()), 2, up_d=False)
    nn.init.ones_(avg[1].weight)
    x = torch.arange(9.0).view(1, 1, 3, 3)  # ceil mode, partial windows average real pixels only
    assert torch.allclose(avg(x)[0, 0], torch.tensor([[(0 + 1 + 3 + 4) / 4, (2 + 5) / 2], [(6 + 7) / 2, 8.0]]))


def test_resnet_d_takes_only_up_resnet_d_kwargs():
    with pytest.raises(ConfigError, match=r"net\[0\].kwargs.drop_path_rate: UP kwarg not supported"):
        resnet("resnet50_D", drop_path_rate=0.1)
    plain = resnet("resnet18", avg_down=True, deep_stem=True)
    assert isinstance(plain.layer2[0].downsample[0], nn.AvgPool2d) and isinstance(plain.conv1, nn.Sequential)


# -- ViT with drop path --------------------------------------------------------------------------
def tiny_vit(**kwargs):
    from up_trainer.tasks.up_nets.vit import build_vit

    kw = {**dict(image_size=8, patch_size=4, patch_stride=4, hidden_dim=8, depth=2, mlp_dim=16, heads=2, dropout=0.0,
                 attention_dropout=0.0, drop_path=0.25), **kwargs}
    return build_vit("vit_base_patch16_224", Options(kw, "net[0].kwargs", "vit_base_patch16_224"))[0]


def test_drop_path_keeps_whole_samples_scaled_by_the_keep_probability():
    from up_trainer.tasks.up_nets.vit import DropPath

    branch = nn.Identity()
    branch.register_forward_hook(DropPath(0.25))
    torch.manual_seed(0)
    out = branch.train()(torch.ones(2000, 3))
    per_sample = out[:, 0]
    # a sample's branch is dropped or scaled by 1 / 0.75
    assert torch.allclose(per_sample.unique(), torch.tensor([0.0, 4 / 3]))
    assert torch.equal(out, per_sample[:, None].expand(-1, 3))  # whole samples, never single values
    assert abs((per_sample == 0).float().mean().item() - 0.25) < 0.03
    assert torch.equal(branch.eval()(torch.ones(4, 3)), torch.ones(4, 3))


def test_vit_drops_both_residual_branches_of_every_block_in_training_only():
    torch.manual_seed(0)
    trunk = tiny_vit()
    for block in trunk.encoder.layers:  # attention branch ends in block.dropout, MLP branch in block.mlp
        assert [h.p for h in block.dropout._forward_hooks.values()] == [0.25]
        assert [h.p for h in block.mlp._forward_hooks.values()] == [0.25]
        assert block.mlp[1].approximate == "tanh"  # UP's GELU
    x = torch.randn(64, 3, 8, 8)
    trunk.eval()
    patches, token = trunk(x)[0]
    assert patches.shape == (64, 8, 2, 2) and token.shape == (64, 8)
    plain = tiny_vit(drop_path=0.0)
    plain.load_state_dict(trunk.state_dict())
    assert torch.equal(plain.eval()(x)[0][1], token)  # eval: drop path is the identity
    # one block, one sample repeated: each copy keeps or drops its attention and MLP branches
    block = trunk.encoder.layers[0]
    x = torch.randn(1, 5, 8).expand(256, 5, 8)
    with torch.no_grad():
        block.eval()
        h = block.ln_1(x[:1])
        x1 = x[:1] + block.self_attention(h, h, h, need_weights=False)[0] / 0.75
        both_kept = x1 + block.mlp(block.ln_2(x1)) / 0.75
        torch.manual_seed(1)
        out = block.train()(x)
    dropped = torch.isclose(out, x, atol=1e-6).flatten(1).all(1)
    kept = torch.isclose(out, both_kept.expand_as(out), atol=1e-5).flatten(1).all(1)
    assert 0 < dropped.sum() < 40 and 100 < kept.sum() < 190  # p^2 = 1/16 and (1 - p)^2 = 9/16 of 256


def test_vit_refuses_a_batch_of_another_size_in_one_line():
    from up_trainer.errors import DataError

    with pytest.raises(DataError, match=r"^net\[0\].kwargs.image_size: the ViT is built for 8 x 8 images"):
        tiny_vit()(torch.zeros(1, 3, 16, 16))


# -- norm_linear and softmax_eql -----------------------------------------------------------------
def test_norm_linear_logits_are_temperature_times_cosine():
    from up_trainer.tasks.up_nets.cls_plus import NormLinear

    layer = NormLinear(2, 3, temperature=30.0)
    assert torch.allclose(layer.weight.norm(dim=0), torch.ones(3))  # unit columns at start
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 2.0]]))
    logits = layer(torch.tensor([[5.0, 0.0], [1.0, 1.0]]))
    r = 2 ** -0.5
    assert torch.allclose(logits, 30 * torch.tensor([[1.0, 0.0, r], [r, r, 1.0]]))


def test_softmax_eql_raises_competitors_logits_by_log_gradient_ratios():
    import torch.nn.functional as F
    from up_trainer.tasks.up_nets.cls_plus import SoftmaxEQL

    loss = SoftmaxEQL(3, indicator="pos", tau=1.0)
    logits, label = torch.tensor([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0]]), torch.tensor([0, 2])
    assert torch.allclose(loss(logits, label), F.cross_entropy(logits, label))  # nothing collected yet
    loss.pos_grad.copy_(torch.tensor([4.0, 1.0, 2.0]))
    # sample 0 (class 0, g=4): + log(1/4), log(2/4) on classes 1, 2; sample 1 (class 2, g=2): log(4/2), log(1/2)
    adjusted = torch.tensor([[1.0, 2.0 + torch.log(torch.tensor(0.25)), 0.5 + torch.log(torch.tensor(0.5))],
                             [torch.log(torch.tensor(2.0)), torch.log(torch.tensor(0.5)), 0.0]])
    assert torch.allclose(loss(logits, label), F.cross_entropy(adjusted, label))
    loss.collect_grad(torch.tensor([[0.1, -0.2, 0.3], [-0.5, 0.25, 0.125]]))
    assert torch.allclose(loss.pos_grad, torch.tensor([4.1, 1.0, 2.125]))
    assert torch.allclose(loss.neg_grad, torch.tensor([0.5, 0.45, 0.3]))
    assert torch.allclose(loss.pos_neg, loss.pos_grad / (loss.neg_grad + 1e-10))
    assert set(loss.state_dict()) == {"pos_grad", "neg_grad", "pos_neg"}  # saved and resumed with the model


def test_eql_net_collects_logit_gradients_through_the_gradient_collector_hook():
    import types

    import torch.nn.functional as F
    from up_trainer.hooks.gradient_collector import GradientCollector
    from up_trainer.tasks.net import build_model

    torch.manual_seed(0)
    model = build_model([
        {"name": "backbone", "type": "resnet18", "kwargs": {"normalize": {"type": "solo_bn"}}},
        {"name": "head", "type": "base_cls_head", "kwargs": {"num_classes": 3, "in_plane": 512,
                                                             "classifier_cfg": {"type": "norm_linear",
                                                                                "kwargs": {"tempearture": 10}}}},
        {"name": "post_process", "type": "base_cls_postprocess",
         "kwargs": {"cls_loss": {"type": "softmax_eql", "kwargs": {"num_classes": 3, "indicator": "pos"}}}}])
    hook = GradientCollector(hook_module=["post_process.cls_loss"], collect_func_module="post_process.cls_loss",
                             grad_type="input")
    hook.name = "gradient_collector"
    hook.before_train(types.SimpleNamespace(module=model))
    label = torch.tensor([0, 2, 2, 1])
    out = model.train()({"image": torch.randn(4, 3, 32, 32), "label": label})
    out["loss"].backward()
    # d mean-CE / d logits = (softmax - one hot) / N; the target's part lands in pos_grad
    d = (out["logits"].detach().softmax(1) - F.one_hot(label, 3)) / 4
    eql = model.post_process.cls_loss
    assert torch.allclose(eql.pos_grad, (d.abs() * F.one_hot(label, 3)).sum(0), atol=1e-6)
    assert torch.allclose(eql.neg_grad, (d.abs() * (1 - F.one_hot(label, 3))).sum(0), atol=1e-6)
    assert out["logits"].abs().max() <= 10 + 1e-5  # cosine logits times the temperature
    hook.after_train(None)


# -- MobileNetV3 in UP's block order -------------------------------------------------------------
def mobilenetv3(mode):
    from up_trainer.tasks.up_nets.mobilenetv3 import build_mobilenetv3

    kw = {"mode": mode, "out_strides": [32], "normalize": {"type": "solo_bn"}}
    return build_mobilenetv3(Options(kw, "net[0].kwargs", "mobilenetv3"))[0]


def test_mobilenetv3_puts_squeeze_excite_before_the_activation():
    from up_trainer.tasks.up_nets.mobilenetv3 import SqueezeExcite

    trunk = mobilenetv3("large")
    block = trunk.features[4]  # kernel 5, expansion 72, SE, ReLU, stride 2
    kinds = [type(m).__name__ for m in block.conv]
    assert kinds == ["Conv2d", "BatchNorm2d", "ReLU", "Conv2d", "BatchNorm2d", "SqueezeExcite", "ReLU", "Conv2d",
                     "BatchNorm2d"]
    assert block.conv[3].groups == 72 and block.conv[3].stride == (2, 2)
    se = SqueezeExcite(8)
    assert [m.bias for m in se.fc if isinstance(m, nn.Linear)] == [None, None] and se.fc[0].out_features == 2
    nn.init.zeros_(se.fc[2].weight)  # hard sigmoid(0) = 1/2
    x = torch.randn(2, 8, 3, 3)
    assert torch.allclose(se(x), x / 2)
    with torch.no_grad():
        assert trunk.eval()(torch.randn(1, 3, 64, 64))[0].shape == (1, 1280, 1, 1)


def test_mobilenetv3_large_parameters_differ_from_torchvision_by_the_squeeze_excite_only():
    import torchvision

    up = n_params(mobilenetv3("large")) + 1280 * 1000 + 1000  # + base_cls_head
    tv = n_params(torchvision.models.mobilenet_v3_large())
    # torchvision's SE: 1x1 convs with biases, squeeze width rounded up to 8 (UP: exp // 4, no bias).
    # (expansion, torchvision squeeze, UP squeeze) of the eight SE blocks:
    se = [(72, 24, 18), (120, 32, 30), (120, 32, 30), (480, 120, 120), (672, 168, 168), (672, 168, 168),
          (960, 240, 240), (960, 240, 240)]
    assert tv - up == sum(2 * e * (s_tv - s_up) + s_tv + e for e, s_tv, s_up in se)
    assert round(up / 1e6, 1) == 5.5
    small = n_params(mobilenetv3("small"))
    assert small < n_params(mobilenetv3("large")) / 2


def test_up_vit_weights_are_renamed_to_torchvision_names():
    from up_trainer.tasks.up_nets.keymap import backbone_rules, translate

    up_names = {"backbone.embedding.weight": 1, "backbone.cls_token": 2, "backbone.pos_embedding": 3,
                "backbone.layers.encoder_0.norm1.weight": 4, "backbone.layers.encoder_0.attention.to_qkv.weight": 5,
                "backbone.layers.encoder_0.attention.to_qkv.bias": 6,
                "backbone.layers.encoder_0.attention.to_out.bias": 7,
                "backbone.layers.encoder_11.feedforward.mlp2.weight": 8, "backbone.encoder_norm.bias": 9,
                "head.classifier.weight": 10}
    ours = translate(up_names, {"backbone": backbone_rules("vit_base_patch16_224")})
    trunk = tiny_vit(depth=12)
    names = {f"backbone.{k}" for k in trunk.state_dict()} | {"head.classifier.weight"}
    assert set(ours) <= names and len(ours) == len(up_names)


# -- imagenet_lt evaluator and save_score ----------------------------------------------------------
def test_imagenet_lt_averages_per_class_accuracy_within_shot_groups(tmp_path):
    from up_trainer.errors import DataError
    from up_trainer.tasks.cls.evaluator import LongTailAccuracy

    freq = tmp_path / "freq.json"
    freq.write_text("[500, 100, 20, 3]")  # many (> 100), median (20..100), median, low (< 20)
    ev = LongTailAccuracy(topk=[1, 2], cls_freq=str(freq), many_shot_thr=100, low_shot_thr=20)
    ev.load_files()

    def rec(i, label, topk):
        return {"index": i, "label": label, "topk": topk}

    results = [rec(0, 0, [0, 1]), rec(1, 0, [1, 0]), rec(2, 0, [2, 3]), rec(3, 0, [0, 2]),  # class 0: 2/4, 3/4
               rec(4, 1, [1, 0]), rec(5, 2, [3, 1]), rec(6, 2, [3, 2]),  # class 1: 1/1, 1/1; class 2: 0/2, 1/2
               rec(7, 3, [0, 1])]  # class 3: 0/1, 0/1
    m = ev.evaluate(results)
    assert m["top1"] == 100 * 3 / 8 and m["top2"] == 100 * 5 / 8
    assert m["many_shot_acc_top1"] == 50.0 and m["many_shot_acc_top2"] == 75.0
    assert m["median_shot_acc_top1"] == (100 + 0) / 2 and m["median_shot_acc_top2"] == (100 + 50) / 2
    assert m["low_shot_acc_top1"] == 0.0 and m["low_shot_acc_top2"] == 0.0
    freq.write_text("[500, 100]")
    ev.load_files()
    with pytest.raises(DataError, match="2 classes, but the evaluation set has label 3"):
        ev.evaluate(results)
    with pytest.raises(DataError, match="cls_freq file not found"):
        LongTailAccuracy(cls_freq=str(tmp_path / "missing.json")).load_files()
    (tmp_path / "bad.json").write_text("[500,")
    with pytest.raises(DataError, match="cannot read a JSON list"):
        LongTailAccuracy(cls_freq=str(tmp_path / "bad.json")).load_files()


def test_save_score_keeps_every_class_score_in_the_results(tmp_path):
    import json
    import types

    from up_trainer.engine.builder import build_evaluator

    ev = build_evaluator({"dataset": {"evaluator": {"type": "imagenet", "kwargs": {"topk": [1]}}}},
                         types.SimpleNamespace(save_score=True))
    scores = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]])
    ev.process({"index": torch.tensor([0, 1]), "label": torch.tensor([1, 2])}, {"scores": scores})
    ev.write_results(ev.results(), str(tmp_path / "results.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["scores"] for r in rows] == scores.tolist() and [r["pred"] for r in rows] == [1, 0]


# -- RandAugIncre --------------------------------------------------------------------------------
def test_rand_aug_incre_ops_grow_with_the_magnitude_as_up_defines_them():
    from up_trainer.tasks.rand_augment_incre import OPS, _affine_nearest

    ops = {name: (op, low, high) for name, op, low, high in OPS}
    img = torch.tensor([[[0, 100, 200, 255]]], dtype=torch.uint8)
    posterize, solarize, solarize_add = ops["posterize"][0], ops["solarize"][0], ops["solarize_add"][0]
    assert torch.equal(posterize(img, 0.0), torch.tensor([[[0, 96, 192, 240]]], dtype=torch.uint8))  # 4 bits
    assert torch.equal(posterize(img, 3.6), torch.tensor([[[0, 0, 128, 128]]], dtype=torch.uint8))  # 4 - 3 bits
    assert torch.equal(solarize(img, 0.0), img)  # threshold 256: nothing inverted at magnitude 0
    assert torch.equal(solarize(img, 100.0), torch.tensor([[[0, 100, 55, 0]]], dtype=torch.uint8))  # >= 156
    # + 30.5, truncated: 30, 130, 230, 255; then inverted from 128 up
    assert torch.equal(solarize_add(img, 30.5), torch.tensor([[[30, 125, 25, 0]]], dtype=torch.uint8))
    ramp = torch.arange(12, dtype=torch.uint8).view(1, 3, 4)
    shifted = _affine_nearest(ramp, 1, 0, 1, 0, 1, 0)  # Pillow's (1, 0, v, 0, 1, 0): content moves left
    assert torch.equal(shifted, torch.tensor([[[1, 2, 3, 0], [5, 6, 7, 0], [9, 10, 11, 0]]], dtype=torch.uint8))
    sheared = _affine_nearest(ramp, 1, 0.5, 0, 0, 1, 0)  # x + y / 2 at centres: floor(x + 0.75 + y / 2)
    assert torch.equal(sheared, torch.tensor([[[0, 1, 2, 3], [5, 6, 7, 0], [9, 10, 11, 0]]], dtype=torch.uint8))


def test_rand_aug_incre_draws_from_torch_and_skips_half_the_ops():
    from up_trainer.tasks.rand_augment_incre import RandAugIncre

    aug = RandAugIncre(n=2, m=5)
    torch.manual_seed(0)
    plans = [aug.plan() for _ in range(2000)]
    assert abs(sum(len(p) for p in plans) / 2000 - 1.0) < 0.06  # 2 ops, each kept with probability 1/2
    assert {round(v, 9) for p in plans for name, _, v in p if name == "color"} == {1.0}  # 0.1 + 5 / 10 x 1.8
    torch.manual_seed(3)
    image = torch.rand(3, 16, 16)
    first = aug(image)
    torch.manual_seed(3)
    torch.rand(3, 16, 16)
    assert torch.equal(aug(image), first)  # the same global seed, the same augmentation
    assert first.dtype == torch.float32 and first.shape == image.shape
    with pytest.raises(ConfigError, match="m: expected a magnitude in"):
        RandAugIncre(m=11)


# -- repeat-factor sampling ----------------------------------------------------------------------
def test_repeat_factors_follow_the_rarest_class_of_each_image():
    from up_trainer.data.repeat_factor import repeat_factors

    # 10 images: class 0 in all (f = 1), class 1 in one (f = 0.1), class 2 in two (f = 0.2)
    classes = [[0, 1], [0, 2], [0, 2]] + [[0]] * 6 + [[]]
    classes[-1] = []  # an image without boxes
    classes[-2] = [0]
    # t = 0.4, pn = 0.5: r_0 = max(1, 0.4 ** 0.5) = 1, r_1 = (0.4 / 0.1) ** 0.5 = 2, r_2 = 2 ** 0.5 = 1.414
    assert repeat_factors(classes, t=0.4, pn=0.5, ri_mode="ceil", ri_if_empty=1) == [2, 2, 2] + [1] * 7
    assert repeat_factors(classes, t=0.4, pn=0.5, ri_mode="floor", ri_if_empty=3) == [2, 1, 1] + [1] * 6 + [3]
    assert repeat_factors(classes, t=0.4, pn=1.0, ri_mode="round") == [4, 2, 2] + [1] * 7  # 4, 2, 1


def test_repeat_factor_epochs_are_deterministic_resumable_and_sharded():
    from collections import Counter

    from up_trainer.data.repeat_factor import RepeatFactorSampler

    sampler = RepeatFactorSampler([1, 3, 0, 2], seed=7)
    sampler.set_epoch(1)
    order = list(sampler)
    assert Counter(order) == {0: 1, 1: 3, 3: 2} and len(sampler) == 6
    again = RepeatFactorSampler([1, 3, 0, 2], seed=7)
    again.set_epoch(1, start=4)  # a resumed run picks up 4 samples in
    assert list(again) == order[4:]
    again.set_epoch(2)
    assert sorted(again) == sorted(order)
    shards = [RepeatFactorSampler([1, 3, 0, 2], seed=7, rank=r, world_size=4) for r in range(4)]
    for s in shards:
        s.set_epoch(1)
    assert [len(s) for s in shards] == [2] * 4  # 6 padded to 8 by wrapping
    assert Counter(i for s in shards for i in s) - Counter(order) == Counter(order[:2])


def test_up_repeat_factor_sampler_maps_to_the_dataset_key_and_the_loader():
    import torch
    from up_trainer.config.up_dataset import translate_dataset
    from up_trainer.data.loader import LoaderFactory

    cfg = {"dataset": {"train": {"dataset": {"type": "cls", "kwargs": {}},
                                 "batch_sampler": {"type": "base", "kwargs": {"batch_size": 2, "sampler": {
                                     "type": "repeat_factor", "kwargs": {"t": 0.5, "ri_mode": "ceil", "pn": 1.0,
                                                                         "static_size": False}}}}}}}
    translate_dataset(cfg, [])
    assert cfg["dataset"]["repeat_factor"] == {"t": 0.5, "ri_mode": "ceil", "pn": 1.0, "static_size": False}

    class Tiny(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return {"image": torch.zeros(1), "label": i, "index": i}

        def image_classes(self):
            return [[0], [0], [0], [1]]  # class 1: f = 1/4, r = 0.5 / 0.25 = 2

    ds_cfg = {"num_workers": 0, "pin_memory": False, "batch_size": 2, "drop_last": False,
              "repeat_factor": {"t": 0.5, "pn": 1.0, "ri_mode": "ceil", "ri_if_empty": 1}}
    loaders = LoaderFactory(ds_cfg, Tiny(), None, seed=0)
    assert loaders.epoch_len() == 3  # 5 samples in batches of 2
    seen = [i for batch in loaders.train_loader(0) for i in batch["index"].tolist()]
    assert sorted(seen) == [0, 1, 2, 3, 3]


def test_repeat_factor_refuses_what_it_cannot_honour_in_one_line():
    from up_trainer.data.repeat_factor import check_repeat_factor

    with pytest.raises(ConfigError, match=r"ri_mode: 'random_round' \(UP's default\) is not mapped \(its epoch length"):
        check_repeat_factor({"t": 0.001})
    with pytest.raises(ConfigError, match=r"dataset.repeat_factor.t: expected a number > 0"):
        check_repeat_factor({"t": 0, "ri_mode": "ceil"})
    assert check_repeat_factor({"ri_mode": "floor"}) == {"t": 0.001, "pn": 0.5, "ri_mode": "floor", "ri_if_empty": 1}


# -- inference_only meta files ---------------------------------------------------------------------
def test_inference_only_meta_files_and_folders_give_unlabeled_images(tmp_path):
    from PIL import Image

    from up_trainer.errors import DataError
    from up_trainer.tasks.cls.meta_dataset import ClsMetaDataset

    (tmp_path / "imgs" / "sub").mkdir(parents=True)
    for name in ("b.png", "sub/a.PNG", "c.JPG"):
        Image.new("RGB", (4, 4), (10, 20, 30)).save(tmp_path / "imgs" / name, format="JPEG" if name.endswith("JPG")
                                                   else "PNG")
    (tmp_path / "imgs" / "notes.txt").write_text("not an image")
    (tmp_path / "list.txt").write_text("b.png\nsub/a.PNG\n")
    listed = ClsMetaDataset(str(tmp_path / "list.txt"), image_dir=str(tmp_path / "imgs"), meta_type="inference_only",
                            num_classes=5)
    assert len(listed) == 2 and set(listed[0]) == {"image", "index"} and listed.num_classes == 5
    assert listed.image_classes() == [[], []]
    found = ClsMetaDataset("unused.txt", meta_type="inference_only",
                           inference_cfg={"inference_from": str(tmp_path / "imgs"), "folder_images_save_path": "x.txt"})
    assert [os.path.relpath(p, tmp_path / "imgs") for p, _, _ in found.records] == ["b.png", "c.JPG", "sub/a.PNG"]
    assert not (tmp_path / "x.txt").exists() and found.num_classes is None
    with pytest.raises(DataError, match="inference_from: .* is neither a folder nor a file"):
        ClsMetaDataset("m.txt", inference_cfg={"inference_from": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError, match="inference_cfg.resume: unknown key"):
        ClsMetaDataset("m.txt", inference_cfg={"resume": {}})


def test_lvis_evaluator_reads_its_gt_file_when_the_run_is_built(tmp_path):
    """Built for ``up config`` without reading gt_file (it may not be on this machine); the
    run's builder reads it, so a missing file stops the run before training, in one line."""
    from up_trainer.engine.builder import build_evaluator
    from up_trainer.registry import EVALUATORS

    cfg = {"type": "LVIS", "kwargs": {"gt_file": str(tmp_path / "missing.json"), "iou_types": ["bbox"]}}
    EVALUATORS.build(cfg, "dataset.evaluator")
    with pytest.raises(UserError) as err:
        build_evaluator({"dataset": {"evaluator": cfg}}, test_set=None)
    message = str(err.value)
    assert "missing.json" in message and "\n" not in message
