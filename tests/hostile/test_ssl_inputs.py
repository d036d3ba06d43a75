"""Hostile input to self-supervised pretraining: UP's ssl net and its wrappers, the native
pretraining nets, the two-view data they read, UP's self entry (freeze_patterns) and a
linear probe's pretrain_model. Each is one line naming the key or the file (exit 2)."""
import copy
import os

import pytest
import torch
import yaml

from conftest import UP_FIXTURES, invoke
from hostile_helpers import assert_one_line, write_yaml

RESNET = {"type": "resnet18", "kwargs": {"input_channel": 1, "out_layers": [1], "out_strides": [4],
                                         "normalize": {"type": "solo_bn"}}}
VIEWS = {"type": "two_views", "kwargs": {"transforms": [{"type": "RandomResizedCrop", "kwargs": {"size": 8}}]}}


def native(net, transforms=(VIEWS,), batch=8, **dataset):
    return {"runtime": {"seed": 0, "num_threads": 1},
            "dataset": {"batch_size": batch, **dataset, "train": {"type": "digits", "kwargs": {
                "split": "train", "subset": 16, "transforms": list(transforms)}}},
            "trainer": {"max_epoch": 1, "is_eval": False}, "net": net}


def up_file(rel):
    with open(os.path.join(UP_FIXTURES, rel), encoding="utf-8") as f:
        return yaml.safe_load(f)


def run(args):
    return invoke([str(a) for a in args])


# -- UP's ssl net ------------------------------------------------------------------------------
def _moco_v2(change):
    cfg = up_file("ssl/mocov2/moco_v2.yaml")
    change(cfg)
    return cfg


@pytest.mark.parametrize("change, fragments", [
    (lambda c: c["net"][0]["wrappers"][0].update(type="byol"),
     ("net[0].wrappers[0].type", "UP's ssl wrapper 'byol' is not mapped", "moco")),
    (lambda c: c["net"][0]["wrappers"].append({"type": "simclr"}), ("net[0].wrappers", "one wrapper")),
    (lambda c: c["net"][0]["wrappers"][0]["kwargs"].update(queue=7), ("net[0].wrappers[0].kwargs.queue", "unknown argument")),
    (lambda c: c["net"][0]["multi_model"][1]["kwargs"].update(out_layers=[3]),
     ("net[0].multi_model[1]", "momentum encoder is a copy of the online one")),
    (lambda c: c["net"][0]["multi_model"].pop(), ("net[0].multi_model", "takes 2 encoder(s)")),
    (lambda c: c["net"][1]["kwargs"]["ssl_loss"].update(type="simclr_loss"),
     ("net[1].kwargs.ssl_loss.type", "trained with moco_loss")),
    (lambda c: c["net"].pop(), ("net", "base_ssl_postprocess")),
    (lambda c: c["net"][0]["wrappers"][0]["kwargs"].update(K=65000),
     ("net.kwargs.queue_size", "65000", "not a multiple of the 64 keys")),
])
def test_up_ssl_net_refused_in_one_line(tmp_path, change, fragments):
    res = run(["config", "--config", write_yaml(tmp_path / "c.yaml", _moco_v2(change))])
    assert_one_line(res, *fragments)


@pytest.mark.parametrize("change, fragments", [
    (lambda o: o.update(special_param_group=[{"key": "predictr"}]),
     ("trainer.optimizer.special_param_group[0].key", "'predictr' is in no trainable parameter's name")),
    (lambda o: o.update(special_param_group=[{"lr": 0.1}]), ("trainer.optimizer.special_param_group[0].key",)),
    (lambda o: o.update(special_param_group="predictor"), ("trainer.optimizer.special_param_group", "a list")),
    (lambda o: o.update(pconfig={"bn_w": {"kwargs": {"weight_decay": 0}}}),
     ("trainer.optimizer.special_param_group", "only without pconfig")),
])
def test_special_param_group_refused_in_one_line(tmp_path, change, fragments):
    cfg = up_file("ssl/simsiam/simsiam_100e.yaml")
    change(cfg["trainer"]["optimizer"])
    assert_one_line(run(["config", "--config", write_yaml(tmp_path / "c.yaml", cfg)]), *fragments)


def test_moco_v3_with_two_temperatures_refused(tmp_path):
    cfg = up_file("ssl/mocov3/moco_v3.yaml")
    cfg["net"][1]["kwargs"]["ssl_loss"]["kwargs"]["tau"] = 0.5
    assert_one_line(run(["config", "--config", write_yaml(tmp_path / "c.yaml", cfg)]),
                    "net[0].wrappers[0].kwargs.T", "one temperature")


# -- native pretraining nets and their data ----------------------------------------------------
@pytest.mark.parametrize("net, fragments", [
    ({"type": "moco", "kwargs": {"backbone": RESNET, "queue_size": 12}}, ("net.kwargs.queue_size", "multiple")),
    ({"type": "moco", "kwargs": {"backbone": RESNET, "momentum": 1.5}}, ("net.kwargs.momentum",)),
    ({"type": "simclr", "kwargs": {"backbone": RESNET, "temperature": 0}}, ("net.kwargs.temperature",)),
    ({"type": "simclr", "kwargs": {"backbone": {"type": "resnet19"}}}, ("net.kwargs.backbone.type", "unknown pretraining backbone type")),
    ({"type": "simsiam", "kwargs": {"backbone": "resnet18"}}, ("net.kwargs.backbone", "expected dict")),
    ({"type": "mae", "kwargs": {"backbone": RESNET}}, ("net.kwargs.backbone.type", "ViT")),
    ({"type": "mae", "kwargs": {"backbone": RESNET, "mask_ratio": 1.0}}, ("net.kwargs.mask_ratio",)),
])
def test_native_pretraining_net_refused_in_one_line(tmp_path, net, fragments):
    res = run(["config", "--config", write_yaml(tmp_path / "c.yaml", native(net))])
    assert_one_line(res, *fragments)


def test_contrastive_net_on_one_view_per_image_stops_in_one_line(tmp_path):
    cfg = native({"type": "simclr", "kwargs": {"backbone": RESNET}}, transforms=[])
    res = run(["train", "--config", write_yaml(tmp_path / "c.yaml", cfg), "--work-dir", tmp_path / "run",
               "--dry-run", "--device", "cpu"])
    assert_one_line(res, "two views per image", "two_views")


def test_pretraining_net_with_a_test_set_stops_in_one_line(tmp_path):
    cfg = native({"type": "simsiam", "kwargs": {"backbone": RESNET, "dim": 8, "pred_dim": 4}})
    cfg["dataset"]["test"] = {"type": "digits", "kwargs": {"split": "test", "subset": 8}}
    cfg["trainer"]["is_eval"] = True
    res = run(["train", "--config", write_yaml(tmp_path / "c.yaml", cfg), "--work-dir", tmp_path / "run",
               "--dry-run", "--device", "cpu"])
    assert_one_line(res, "dataset.test", "no predictions to evaluate")


# -- UP's self entry and the linear probe's pretrain_model ---------------------------------------
PROBE = [{"name": "fix_layers", "type": "self", "kwargs": {"freeze_patterns": ["backbone"]}},
         {"name": "backbone", **RESNET},
         {"name": "head", "type": "base_cls_head", "kwargs": {"num_classes": 10, "in_plane": 64}},
         {"name": "post_process", "type": "base_cls_postprocess", "kwargs": {"cls_loss": {"type": "ce"}}}]


def probe(**saver):
    return {"runtime": {"seed": 0, "num_threads": 1},
            "dataset": {"batch_size": 8, "train": {"type": "digits", "kwargs": {"split": "train", "subset": 16}}},
            "trainer": {"max_epoch": 1}, "saver": saver, "net": copy.deepcopy(PROBE)}


@pytest.mark.parametrize("patterns, fragments", [
    (["backbone", "neck"], ("net[0].kwargs.freeze_patterns[1]", "'neck' matches no parameter", "backbone, head")),
    (["r:(unclosed"], ("net[0].kwargs.freeze_patterns[0]", "not a regular expression")),
    ([3], ("net[0].kwargs.freeze_patterns[0]", "prefix or r:<regex>")),
])
def test_freeze_patterns_refused_in_one_line(tmp_path, patterns, fragments):
    cfg = probe()
    cfg["net"][0]["kwargs"]["freeze_patterns"] = patterns
    assert_one_line(run(["config", "--config", write_yaml(tmp_path / "c.yaml", cfg)]), *fragments)


def test_an_error_after_the_self_entry_names_the_files_own_entry(tmp_path):
    cfg = probe()
    cfg["net"][2]["kwargs"]["in_plane"] = 65
    assert_one_line(run(["config", "--config", write_yaml(tmp_path / "c.yaml", cfg)]), "net[2].kwargs.in_plane")


def test_linear_probe_on_a_checkpoint_without_backbone_keys_stops_in_one_line(tmp_path):
    weights = tmp_path / "other.pth"
    torch.save({"model": {"encoder.conv1.weight": torch.zeros(64, 1, 7, 7)}}, weights)
    cfg = probe(pretrain_model=str(weights), save_dir=str(tmp_path / "ckpts"))
    res = run(["train", "--config", write_yaml(tmp_path / "c.yaml", cfg), "--work-dir", tmp_path / "run",
               "--device", "cpu"])
    assert_one_line(res, "saver.pretrain_model", str(weights), "no weights for the frozen parameters")
    saved = os.listdir(tmp_path / "ckpts") if os.path.exists(tmp_path / "ckpts") else []
    assert not [f for f in saved if f.endswith(".pth")]  # stopped before any training


# -- UP's layer_decay (MAE fine-tuning) -----------------------------------------------------------
def _finetune(change):
    cfg = up_file("ssl/mae/mae_vit_base_patch16_dec512d8b_finetune.yaml")
    change(cfg["trainer"]["optimizer"]["pconfig"]["layer_decay"], cfg)
    # the file's top-level anchors (num_classes, transforms) are inlined by the dump: drop them
    return {k: v for k, v in cfg.items() if k in ("runtime", "dataset", "trainer", "saver", "hooks", "net")}


@pytest.mark.parametrize("change, fragments", [
    (lambda d, c: d.update(value=1.5), ("pconfig.layer_decay.value", "must be in (0, 1], got 1.5")),
    (lambda d, c: d.update(value=0), ("pconfig.layer_decay.value", "must be in (0, 1], got 0")),
    (lambda d, c: d.update(type="swin_base"), ("pconfig.layer_decay.type", "no type 'swin_base'", "vit_base")),
    (lambda d, c: d.update(base_lr=0), ("pconfig.layer_decay.base_lr", "must be > 0")),
    # a ResNet under the ViT's layer decay: no layer ids to give
    (lambda d, c: c["net"].__setitem__(slice(0, 2), up_file("ssl/mocov1/moco_v1_imagenet_linear.yaml")["net"][1:3]),
     ("pconfig.layer_decay.type", "needs a ViT backbone", "paramwise_cfg.decay_rate")),
])
def test_up_layer_decay_refused_in_one_line(tmp_path, change, fragments):
    res = run(["config", "--config", write_yaml(tmp_path / "c.yaml", _finetune(change))])
    assert_one_line(res, *fragments)
