"""``net: {type: onenet, kwargs: {...}}``: OneNet from native kwargs. The family's own kwargs
(anchors, one-to-one matching costs, losses, NMS-free prediction) are :func:`onenet_on_parts`'s;
the native entry puts them on a torchvision backbone, an FPN and the RetinaNet-style dense head
(:mod:`..anchor_head`); UP's net lists (``RetinaHeadWithBN`` / ``RetinaSubNet`` +
``onenet_post``) map their kwargs onto the same function over UP's ResNet, FPN and head
(:mod:`up_trainer.tasks.up_nets.onenet_net`)."""
from functools import partial
from typing import List, Optional

from torch import nn

from ....errors import ConfigError
from ..anchor_head import RetinaPlusHead
from ..anchor_model import RetinaPlusModel
from ..box_ops import box_coder, quality_focal_loss
from ..pyramid_levels import cell_anchors, fpn_trunk
from .criterion import OneNetCriterion, sigmoid_focal_sum
from .matcher import OneNetMatcher
from .predictor import OneNetPredictor

CLASS_LOSSES = ("qfl", "focal")
HEAD_NORMS = ("bn", "gn", "none")


def _numbers(key, values):
    if not values or any(not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0 for v in values):
        raise ConfigError(key, f"expected a non-empty list of positive numbers, got {values!r}")
    return [float(v) for v in values]


def onenet_on_parts(backbone, neck, head, strides, anchor_ratios=(1.0,), anchor_scales=(6.0, 8.0), cls_loss="qfl",
                    qfl_beta=2.0, focal_alpha=0.25, focal_gamma=2.0, cls_weight=2.0, giou_weight=2.0, l1_weight=5.0,
                    all_reduce_norm=True, cost_cls=2.0, cost_l1=5.0, cost_giou=2.0, cost_alpha=0.25, cost_gamma=2.0,
                    detections_per_img=100, min_size=0.0, image_mean=None, image_std=None):
    """The OneNet :class:`RetinaPlusModel` on a built ``backbone``, ``neck`` (giving ``strides``)
    and dense ``head`` (one anchor per ratio x scale at each location)."""
    ratios, scales = _numbers("anchor_ratios", anchor_ratios), _numbers("anchor_scales", anchor_scales)
    if len(ratios) * len(scales) != head.num_anchors:
        raise ConfigError("anchor_scales", f"anchor_ratios x anchor_scales give {len(ratios) * len(scales)} anchors "
                          f"per location, the head predicts {head.num_anchors}")
    if cls_loss not in CLASS_LOSSES:
        raise ConfigError("cls_loss", f"{cls_loss!r} is not one of {', '.join(CLASS_LOSSES)}")
    for key, value in (("qfl_beta", qfl_beta), ("focal_gamma", focal_gamma), ("l1_weight", l1_weight)):
        if value < 0:
            raise ConfigError(key, f"must be >= 0, got {value}")
    if not isinstance(detections_per_img, int) or detections_per_img < 1:
        raise ConfigError("detections_per_img", f"must be an integer >= 1, got {detections_per_img!r}")
    coder = box_coder()
    loss = partial(quality_focal_loss, beta=qfl_beta) if cls_loss == "qfl" else \
        partial(sigmoid_focal_sum, alpha=focal_alpha, gamma=focal_gamma)
    matcher = OneNetMatcher(cost_cls, cost_l1, cost_giou, cost_alpha, cost_gamma)
    criterion = OneNetCriterion(coder, matcher, loss, cls_loss == "qfl", cls_weight, giou_weight, l1_weight,
                                all_reduce_norm)
    return RetinaPlusModel(backbone, neck, head, criterion, OneNetPredictor(coder, detections_per_img, min_size),
                           strides, [cell_anchors(s, ratios, scales) for s in strides],
                           image_mean=image_mean, image_std=image_std)


def onenet(num_classes: int = 80, backbone: str = "resnet18", returned_layers: Optional[List[int]] = None,
           fpn_channels: int = 256, extra_levels: int = 2, trainable_layers: Optional[int] = None,
           frozen_bn: bool = False,
           head_convs: int = 4, head_norm: str = "bn", prior_prob: float = 0.01,
           anchor_ratios: List[float] = (1.0,), anchor_scales: List[float] = (6.0, 8.0), cls_loss: str = "qfl",
           qfl_beta: float = 2.0, focal_alpha: float = 0.25, focal_gamma: float = 2.0, cls_weight: float = 2.0,
           giou_weight: float = 2.0, l1_weight: float = 5.0, all_reduce_norm: bool = True, cost_cls: float = 2.0,
           cost_l1: float = 5.0, cost_giou: float = 2.0, cost_alpha: float = 0.25, cost_gamma: float = 2.0,
           detections_per_img: int = 100, min_size: float = 0.0,
           image_mean: Optional[List[float]] = (0.485, 0.456, 0.406),
           image_std: Optional[List[float]] = (0.229, 0.224, 0.225)):
    """OneNet: each ground-truth box takes its one cheapest anchor (focal class cost + L1 +
    GIoU), every other anchor is background; QFL or focal class loss, GIoU and L1 box losses;
    prediction keeps the best (anchor, class) scores, no NMS."""
    if head_norm not in HEAD_NORMS:
        raise ConfigError("head_norm", f"{head_norm!r} is not one of {', '.join(HEAD_NORMS)}")
    if head_norm == "gn" and fpn_channels % 32:
        raise ConfigError("fpn_channels", f"{fpn_channels}: head_norm gn needs a multiple of 32 (GroupNorm(32))")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError("num_classes", f"must be an integer >= 1, got {num_classes!r}")
    if not 0 < prior_prob < 1:
        raise ConfigError("prior_prob", f"must be in (0, 1), got {prior_prob}")
    if (image_mean is None) != (image_std is None):
        raise ConfigError("image_std" if image_std is None else "image_mean", "give image_mean and image_std "
                          "together (or both null: the data pipeline normalises)")
    body, fpn, channels, strides = fpn_trunk(backbone, returned_layers, fpn_channels, extra_levels, trainable_layers,
                                             frozen_bn)
    norm = {"bn": nn.BatchNorm2d, "gn": partial(nn.GroupNorm, 32), "none": None}[head_norm]
    anchors = len(_numbers("anchor_ratios", anchor_ratios)) * len(_numbers("anchor_scales", anchor_scales))
    head = RetinaPlusHead(channels, num_classes, anchors, len(strides), channels, head_convs, norm,
                          norm_per_level=head_norm == "bn", iou_branch=False, prior=prior_prob)
    return onenet_on_parts(body, fpn, head, strides, anchor_ratios, anchor_scales, cls_loss, qfl_beta, focal_alpha,
                           focal_gamma, cls_weight, giou_weight, l1_weight, all_reduce_norm, cost_cls, cost_l1,
                           cost_giou, cost_alpha, cost_gamma, detections_per_img, min_size, image_mean, image_std)
