"""``net: {type: up_fcos, kwargs: {...}}``: UP's FCOS from native kwargs. The family's own kwargs
(head, targets, losses, decode) are :func:`fcos_on_trunk`'s; the native entry puts them on a
torchvision backbone and FPN, and UP's net lists (``FPN`` + ``FcosHead`` + ``fcos_post``) map
their kwargs onto the same function over UP's ResNet and FPN
(:mod:`up_trainer.tasks.up_nets.fcos_net`)."""
from functools import partial
from typing import List, Optional

from torch import nn

from ....errors import ConfigError
from .model import FcosModel
from .parts import FcosCriterion, FcosHead, FcosPostprocess

HEAD_NORMS = {"none": None, "gn": partial(nn.GroupNorm, 32), "bn": nn.BatchNorm2d}
FIVE_LEVEL_RANGES = [[-1, 64], [64, 128], [128, 256], [256, 512], [512, 100000]]  # FCOS's, strides 8-128


def _check(key, ok, want, value):
    if not ok:
        raise ConfigError(key, f"{want}, got {value!r}")


def fcos_on_trunk(backbone, neck, in_channels, strides, num_classes, head_channels=256, head_convs=4, norm=None,
                  prior_prob=0.01, loc_ranges=None, center_sample=False, pos_radius=1.0, norm_on_bbox=False,
                  focal_alpha=0.25, focal_gamma=2.0, cls_weight=1.0, giou_weight=1.0, centerness_weight=1.0,
                  score_thresh=0.05, pre_nms_top_n=1000, nms_thresh=0.6, detections_per_img=100):
    """The :class:`FcosModel` on a built ``backbone`` (a list or dict of maps) and ``neck``
    (a torchvision-style FPN over a dict) giving ``in_channels`` at ``strides``."""
    levels = len(strides)
    if loc_ranges is None:
        if levels != 5:
            raise ConfigError("loc_ranges", f"required for {levels} pyramid levels (the default is FCOS's five)")
        loc_ranges = FIVE_LEVEL_RANGES
    _check("loc_ranges", isinstance(loc_ranges, (list, tuple)) and len(loc_ranges) == levels and all(
        isinstance(r, (list, tuple)) and len(r) == 2 and all(isinstance(v, (int, float)) for v in r)
        for r in loc_ranges), f"expected {levels} [low, high] pairs, one per pyramid level", loc_ranges)
    _check("num_classes", isinstance(num_classes, int) and num_classes >= 1, "must be an integer >= 1", num_classes)
    _check("head_convs", isinstance(head_convs, int) and head_convs >= 0, "must be an integer >= 0", head_convs)
    _check("head_channels", isinstance(head_channels, int) and head_channels >= 1, "must be an integer >= 1",
           head_channels)
    _check("prior_prob", 0 < prior_prob < 1, "must be in (0, 1)", prior_prob)
    _check("pos_radius", pos_radius > 0, "must be > 0", pos_radius)
    _check("score_thresh", 0 <= score_thresh <= 1, "must be in [0, 1]", score_thresh)
    for key, value in (("pre_nms_top_n", pre_nms_top_n), ("detections_per_img", detections_per_img)):
        _check(key, isinstance(value, int) and value >= 1, "must be an integer >= 1", value)
    head = FcosHead(in_channels, num_classes, levels, head_channels, head_convs, norm, prior_prob)
    criterion = FcosCriterion(strides, loc_ranges, focal_alpha, focal_gamma, pos_radius, center_sample, norm_on_bbox,
                              cls_weight, giou_weight, centerness_weight)
    post = FcosPostprocess(strides, score_thresh, pre_nms_top_n, nms_thresh, detections_per_img, norm_on_bbox)
    return FcosModel(backbone, neck, head, criterion, post, strides)


def up_fcos(num_classes: int = 80, backbone: str = "resnet50", returned_layers: Optional[List[int]] = None,
            fpn_channels: int = 256, extra_levels: int = 2, trainable_layers: Optional[int] = None,
            frozen_bn: bool = False, head_channels: int = 256, head_convs: int = 4, head_norm: str = "none",
            prior_prob: float = 0.01, loc_ranges: Optional[List[List[float]]] = None, center_sample: bool = False,
            pos_radius: float = 1.0, norm_on_bbox: bool = False, focal_alpha: float = 0.25, focal_gamma: float = 2.0,
            cls_weight: float = 1.0, giou_weight: float = 1.0, centerness_weight: float = 1.0,
            score_thresh: float = 0.05, pre_nms_top_n: int = 1000, nms_thresh: float = 0.6,
            detections_per_img: int = 100):
    """UP's FCOS: per-level Scale on the distances, centre sampling, focal + GIoU (weighted by
    the centerness target) + centerness BCE, score = sigmoid(cls) x sigmoid(centerness)."""
    from ..pyramid_levels import fpn_trunk

    if head_norm not in HEAD_NORMS:
        raise ConfigError("head_norm", f"{head_norm!r} is not one of {', '.join(HEAD_NORMS)}")
    if head_norm == "gn" and head_channels % 32:
        raise ConfigError("head_channels", f"{head_channels}: head_norm gn needs a multiple of 32 (GroupNorm(32))")
    body, fpn, channels, strides = fpn_trunk(backbone, returned_layers, fpn_channels, extra_levels, trainable_layers,
                                             frozen_bn)
    model = fcos_on_trunk(body, fpn, channels, strides, num_classes, head_channels, head_convs, HEAD_NORMS[head_norm],
                          prior_prob, loc_ranges, center_sample, pos_radius, norm_on_bbox, focal_alpha, focal_gamma,
                          cls_weight, giou_weight, centerness_weight, score_thresh, pre_nms_top_n, nms_thresh,
                          detections_per_img)
    for m in model.roi_head.modules():  # torchvision FCOS's head init: normal(0.01) weights, zero biases
        if isinstance(m, nn.Conv2d):
            nn.init.normal_(m.weight, std=0.01)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    model.roi_head.init_prior()
    return model
