"""The published files' key layouts reach our models: torchvision's architectures, built
without weights (the same names and shapes as the published files), saved and loaded into
ours; Megvii's YOLOX layout mapped onto our YoloxModel. No file is downloaded."""
import re

import pytest
import torch
import torchvision
from torchvision.models import detection

from network_guard import no_network  # noqa: F401  (fixture)
from up_trainer.pretrained.catalog import COCO_DETECTORS, COCO_STAGES
from up_trainer.registry import MODELS

# What depends on the class count (or, for the MobileNet RPN, the anchors per location).
CLASS_DEPENDENT = re.compile(r"cls_logits|cls_score|bbox_pred|classification_head\.module_list")
TORCHVISION_BUILDERS = {
    "FCOS_ResNet50_FPN_Weights.COCO_V1": detection.fcos_resnet50_fpn,
    "RetinaNet_ResNet50_FPN_Weights.COCO_V1": detection.retinanet_resnet50_fpn,
    "FasterRCNN_ResNet50_FPN_Weights.COCO_V1": detection.fasterrcnn_resnet50_fpn,
    "FasterRCNN_MobileNet_V3_Large_FPN_Weights.COCO_V1": detection.fasterrcnn_mobilenet_v3_large_fpn,
    "SSDLite320_MobileNet_V3_Large_Weights.COCO_V1": detection.ssdlite320_mobilenet_v3_large,
}


def saved(tmp_path, module):
    path = tmp_path / "weights.pth"
    torch.save(module.state_dict(), path)
    return str(path)


@pytest.mark.parametrize("kind, backbone", [  # about 5 s each: fcos in the default run, the rest with -m slow
    pair if pair == ("fcos", "resnet50") else pytest.param(*pair, marks=pytest.mark.slow) for pair in COCO_DETECTORS])
def test_torchvision_coco_detectors_load_into_ours_but_for_the_class_count(kind, backbone, tmp_path, no_network):
    name = COCO_DETECTORS[(kind, backbone)]
    theirs = TORCHVISION_BUILDERS[name](weights=None, weights_backbone=None)
    kwargs = {"num_classes": 3, "backbone": backbone, "frozen_bn": True}
    if (kind, backbone) in COCO_STAGES:
        kwargs["returned_layers"] = COCO_STAGES[(kind, backbone)]
    if kind == "ssdlite":
        kwargs.update(min_size=320, frozen_bn=False)
    ours = MODELS.build({"type": kind, "kwargs": kwargs}, "net")
    report = ours.load_pretrained(saved(tmp_path, theirs))
    assert report["missing"] == []
    assert [m for m in report["mismatched"] if not CLASS_DEPENDENT.search(m)] == []
    assert len(report["loaded"]) >= 0.97 * len(ours.state_dict())
    assert no_network == []


@pytest.mark.parametrize("net, arch", [("atss", "resnet18"), ("atss", "mobilenet_v3_large"),
                                       ("fcos", "resnet34")])
def test_imagenet_classifiers_fill_the_whole_backbone(net, arch, tmp_path, no_network):
    classifier = torchvision.models.get_model(arch, weights=None)
    ours = MODELS.build({"type": net, "kwargs": {"num_classes": 3, "backbone": arch}}, "net")
    # as torchvision's published ImageNet files hold it: no BatchNorm batch counters
    state = {k: v for k, v in classifier.state_dict().items() if not k.endswith("num_batches_tracked")}
    path = tmp_path / "classifier.pth"
    torch.save(state, path)
    report = ours.load_pretrained(str(path), backbone_only=True)
    assert report["missing"] == [] and report["mismatched"] == []
    assert all(k.startswith(("backbone.fc.", "backbone.classifier.")) for k in report["unexpected"])
    assert no_network == []


def megvii_names(state):
    """Our YOLOX state dict in Megvii's names, as their YOLOX(YOLOPAFPN(CSPDarknet), YOLOXHead)
    holds it, with the stem's input channels as a BGR-trained file has them."""
    out = {}
    for key, value in state.items():
        part, rest = key.split(".", 1)
        out[{"backbone": "backbone.backbone.", "neck": "backbone.", "roi_head": "head."}[part] + rest] = value
    stem = out["backbone.backbone.stem.conv.conv.weight"]
    out["backbone.backbone.stem.conv.conv.weight"] = stem.reshape(stem.shape[0], 4, 3, 3, 3)[:, :, [2, 1, 0]] \
        .reshape(stem.shape)
    return out


def test_megvii_yolox_files_map_onto_our_yolox(tmp_path, no_network):
    torch.manual_seed(0)
    source = MODELS.build({"type": "yolox", "kwargs": {"num_classes": 80, "size": "nano"}}, "net")
    path = tmp_path / "yolox_nano.pth"
    torch.save({"start_epoch": 300, "model": megvii_names(source.state_dict())}, path)
    torch.manual_seed(1)
    ours = MODELS.build({"type": "yolox", "kwargs": {"num_classes": 80, "size": "nano"}}, "net")
    report = ours.load_pretrained(str(path))
    assert report["missing"] == [] and report["unexpected"] == [] and report["mismatched"] == []
    for key, value in source.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    source.eval(), ours.eval()
    image = torch.rand(1, 3, 64, 64)
    assert torch.equal(source.backbone(image)[0], ours.backbone(image)[0])
    assert no_network == []
