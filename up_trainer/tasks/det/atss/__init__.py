"""UP's improved RetinaNet on stock PyTorch and torchvision ops: ATSS assignment, Quality Focal
Loss, GIoU (+ L1) box loss, the IoU branch (score = sigmoid(cls) x sigmoid(iou)), heads with
convs shared across levels and BatchNorm per level, UP's ``base`` / ``base_multicls`` predictors.

``net: {type: atss, kwargs: {num_classes: C, backbone: resnet18, ...}}`` builds a
:class:`RetinaPlusModel` (see :func:`atss` for every kwarg); UP's net lists (``FPN`` +
``RetinaHeadWithBN`` / ``RetinaHeadWithIOU`` / ``RetinaHeadWithBNIOU`` + ``retina_post`` /
``retina_post_iou`` with the ``atss`` supervisor) are mapped onto the same parts
(:mod:`up_trainer.tasks.up_nets.atss_net`).
"""
from functools import partial
from typing import List, Optional

from torch import nn

from ....errors import ConfigError
from ....registry import MODELS
from ..anchor_assign import NEGATIVE, ATSSAssigner
from ..anchor_head import RetinaPlusHead
from ..box_ops import box_coder, paired_iou
from .efl import EqualizedFocalLoss
from ..anchor_losses import LOSS_KEYS, RetinaPlusCriterion, quality_focal_loss
from ..anchor_model import RetinaPlusModel
from .ota import RetinaSimOTAAssigner
from ..anchor_predict import PREDICTORS, RetinaPlusPredictor, flatten_outputs, grid_anchors

__all__ = ["ATSSAssigner", "EqualizedFocalLoss", "LOSS_KEYS", "NEGATIVE", "PREDICTORS", "RetinaPlusCriterion", "RetinaPlusHead",
           "RetinaPlusModel", "RetinaPlusPredictor", "RetinaSimOTAAssigner", "atss", "box_coder",
           "flatten_outputs", "grid_anchors", "paired_iou", "quality_focal_loss"]
HEAD_NORMS = ("bn", "gn", "none")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _positive(name, value, integer=False):
    if (integer and (not isinstance(value, int) or isinstance(value, bool))) or not value > 0:
        raise ConfigError(name, f"must be {'an integer ' if integer else ''}> 0, got {value!r}")


@MODELS.register("atss")
def atss(num_classes: int, backbone: str = "resnet18", returned_layers: Optional[List[int]] = None,
         fpn_channels: int = 256, extra_levels: int = 2, trainable_layers: Optional[int] = None,
         frozen_bn: bool = False, head_convs: int = 4, head_norm: str = "bn", iou_branch: bool = True,
         anchor_scales: List[float] = (8.0,), anchor_ratios: List[float] = (1.0,), top_k: int = 9,
         qfl_beta: float = 2.0, cls_weight: float = 1.0, giou_weight: float = 1.0, l1_weight: float = 0.0,
         iou_weight: float = 1.0, predictor: str = "base_multicls", score_thresh: float = 0.05,
         nms_thresh: float = 0.6, pre_nms_top_n: int = 1000, detections_per_img: int = 100,
         prior_prob: float = 0.01, image_mean: Optional[List[float]] = IMAGENET_MEAN,
         image_std: Optional[List[float]] = IMAGENET_STD, pretrained: Optional[str] = None,
         pretrained_backbone: Optional[str] = None):
    """ATSS RetinaNet (UP's "improve" recipe): QFL, GIoU (+ L1), IoU branch, per-level BN head."""
    from ..models import build_fpn_backbone, _feature_strides
    from ..pyramid_levels import ExtraLevels, cell_anchors

    _positive("num_classes", num_classes, integer=True)
    for name, value in (("fpn_channels", fpn_channels), ("head_convs", head_convs), ("top_k", top_k),
                        ("pre_nms_top_n", pre_nms_top_n), ("detections_per_img", detections_per_img)):
        _positive(name, value, integer=True)
    if not isinstance(extra_levels, int) or extra_levels < 0:
        raise ConfigError("extra_levels", f"must be an integer >= 0, got {extra_levels!r}")
    if head_norm not in HEAD_NORMS:
        raise ConfigError("head_norm", f"{head_norm!r} is not one of {', '.join(HEAD_NORMS)}")
    if head_norm == "gn" and fpn_channels % 32:
        raise ConfigError("fpn_channels", f"{fpn_channels}: head_norm gn needs a multiple of 32 (GroupNorm(32))")
    if not 0 < prior_prob < 1:
        raise ConfigError("prior_prob", f"must be in (0, 1), got {prior_prob}")
    if (image_mean is None) != (image_std is None):
        raise ConfigError("image_std" if image_std is None else "image_mean", "give image_mean and image_std "
                          "together (or both null: the data pipeline normalises)")
    for name, values in (("anchor_scales", anchor_scales), ("anchor_ratios", anchor_ratios)):
        if not values or any(not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0 for v in values):
            raise ConfigError(name, f"expected a non-empty list of positive numbers, got {values!r}")
    body, fpn, ch = build_fpn_backbone(backbone, returned_layers, fpn_channels, "none", trainable_layers, frozen_bn)
    if extra_levels:  # UP's `downsample: conv`: stride-2 3x3 convs from C5's lateral output
        extra = ExtraLevels(extra_levels, "conv", ch)
        fpn.extra_blocks = extra
        extra.attach(fpn)
    strides = _feature_strides(body, fpn)
    norm = {"bn": nn.BatchNorm2d, "gn": partial(nn.GroupNorm, 32), "none": None}[head_norm]
    ratios, scales = [float(r) for r in anchor_ratios], [float(s) for s in anchor_scales]
    head = RetinaPlusHead(ch, num_classes, len(ratios) * len(scales), len(strides), ch, head_convs, norm,
                          norm_per_level=head_norm == "bn", iou_branch=iou_branch, prior=prior_prob)
    coder = box_coder()
    criterion = RetinaPlusCriterion(coder, top_k, qfl_beta, cls_weight, giou_weight, l1_weight, iou_branch,
                                    iou_weight)
    post = RetinaPlusPredictor(coder, predictor, score_thresh, pre_nms_top_n, pre_nms_top_n, nms_thresh,
                               detections_per_img)
    model = RetinaPlusModel(body, fpn, head, criterion, post, strides,
                            [cell_anchors(s, ratios, scales) for s in strides],
                            image_mean=image_mean, image_std=image_std)
    from ....pretrained import weights_path

    pretrained_backbone = weights_path(pretrained_backbone, "pretrained_backbone", imagenet=backbone)
    pretrained = weights_path(pretrained, "pretrained", coco="no COCO ATSS weights are published in a layout "
                              "read here (a local file of ours or UP's: saver.pretrain_model)")
    if pretrained_backbone:
        model.load_pretrained(pretrained_backbone, backbone_only=True)
    if pretrained:
        model.load_pretrained(pretrained)
    return model
