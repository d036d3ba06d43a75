"""YOLOX (Ge et al. 2021) on stock PyTorch and torchvision ops.

``net: {type: yolox, kwargs: {size: nano|tiny|s|m|l|x, num_classes: C, ...}}`` builds a
:class:`YoloxModel`; its parts (:class:`CSPDarknet`, :class:`YoloxPAFPN`, :class:`YoloXHead`,
:class:`YoloxCriterion` with :class:`SimOTAAssigner`, :class:`YoloxPostprocess`) can be
built one by one (UP's net entries are mapped onto them).
"""
from typing import Optional

from ....registry import MODELS
from ..box_ops import paired_iou
from ..simota import Assignment, SimOTAAssigner
from .backbone import CSPDarknet
from .head import YoloXHead
from .losses import IOU_KINDS, YoloxCriterion, iou_loss, l1_targets
from .model import SIZES, YoloxModel, build_yolox
from .neck import YoloxPAFPN
from .postprocess import YoloxPostprocess, flatten_outputs

__all__ = ["Assignment", "CSPDarknet", "IOU_KINDS", "SIZES", "SimOTAAssigner", "YoloXHead", "YoloxCriterion",
           "YoloxModel", "YoloxPAFPN", "YoloxPostprocess", "build_yolox", "flatten_outputs", "iou_loss",
           "l1_targets", "paired_iou"]


@MODELS.register("yolox")
def yolox(num_classes: int = 80, size: str = "s", depth: Optional[float] = None, width: Optional[float] = None,
          depthwise: Optional[bool] = None, act: str = "silu", iou_loss: str = "square_iou",
          iou_weight: float = 5.0, use_l1: bool = False, center_radius: float = 2.5, candidate_k: int = 10,
          score_thresh: float = 0.01, nms_thresh: float = 0.65, pre_nms_top_n: int = 1000,
          detections_per_img: int = 100, pixel_scale: float = 255.0, prior_prob: float = 0.01,
          neck_shortcut: bool = False, pretrained: Optional[str] = None, min_k: int = 1,
          bn_momentum: float = 0.03):
    """YOLOX (CSPDarknet, PAFPN, decoupled head, SimOTA); ``size`` nano|tiny|s|m|l|x."""
    return build_yolox(num_classes, size, depth, width, depthwise, act, iou_loss, iou_weight, use_l1,
                       center_radius, candidate_k, score_thresh, nms_thresh, pre_nms_top_n,
                       detections_per_img, pixel_scale, prior_prob, neck_shortcut, pretrained, min_k, bn_momentum)
