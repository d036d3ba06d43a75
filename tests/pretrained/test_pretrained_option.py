"""`up train --pretrained` written into the net's kwargs: which key each value lands in."""
import pytest

from up_trainer.cli_weights import apply_pretrained
from up_trainer.errors import ConfigError


def net(kind, **kwargs):
    return {"net": {"type": kind, "kwargs": {"num_classes": 2, **kwargs}}, "runtime": {"seed": 0}}


@pytest.mark.parametrize("kind, value, expected", [
    ("atss", "imagenet", {"pretrained_backbone": "imagenet"}),
    ("atss", "ImageNet", {"pretrained_backbone": "ImageNet"}),
    ("fcos", "coco", {"pretrained": "coco"}),
    ("fcos", "ResNet50_Weights.IMAGENET1K_V1", {"pretrained_backbone": "ResNet50_Weights.IMAGENET1K_V1"}),
    ("fcos", "FCOS_ResNet50_FPN_Weights.COCO_V1", {"pretrained": "FCOS_ResNet50_FPN_Weights.COCO_V1"}),
    ("yolox", "coco", {"pretrained": "coco"}),
    ("yolox", "runs/a/ckpt_best.pth", {"pretrained": "runs/a/ckpt_best.pth"}),
    ("resnet18", "imagenet", {"pretrained": "imagenet"}),
])
def test_each_value_lands_in_its_key(kind, value, expected):
    cfg = apply_pretrained(net(kind), value)
    assert cfg["net"]["kwargs"] == {"num_classes": 2, **expected}
    assert cfg["runtime"] == {"seed": 0}


def test_none_clears_both_keys_and_the_config_passed_in_is_left_as_it_was():
    cfg = net("atss", pretrained="a.pth", pretrained_backbone="imagenet")
    out = apply_pretrained(cfg, "none")
    assert out["net"]["kwargs"] == {"num_classes": 2, "pretrained": None, "pretrained_backbone": None}
    assert cfg["net"]["kwargs"]["pretrained"] == "a.pth"
    assert apply_pretrained(cfg, None) is cfg


def test_a_up_net_list_is_refused_with_what_it_takes_instead():
    with pytest.raises(ConfigError, match="saver.pretrain_model"):
        apply_pretrained({"net": [{"name": "backbone", "type": "x"}]}, "imagenet")
