"""``net: {type: yolov6, kwargs: {...}}``: YOLOv6 from native kwargs, as UP trains it: the
EfficientRep backbone, Rep-PAN neck and efficient decoupled head (:mod:`.parts`) under the
improved RetinaNet's ATSS assignment, QFL + GIoU + L1 + IoU-branch losses and ``base`` /
``base_multicls`` predictors (the shared :mod:`..anchor_assign`, :mod:`..anchor_losses`,
:mod:`..anchor_predict`). UP's net lists (``EfficientRep`` + ``RepPANNeck`` + ``Effidehead`` +
``retina_post_iou``) build the same :class:`RepRetinaPlusModel` on the same parts
(:mod:`up_trainer.tasks.up_nets.yolov6_net`)."""
from typing import List

from torch import nn

from ....errors import ConfigError
from ..anchor_losses import RetinaPlusCriterion
from ..anchor_model import RetinaPlusModel
from ..anchor_predict import PREDICTORS, RetinaPlusPredictor
from ..box_ops import box_coder
from ..pyramid_levels import cell_anchors
from .parts import EfficientRep, Effidehead, RepPANNeck, net_info
from .rep import fuse_rep_blocks

STRIDES = [8, 16, 32]
ACTIVATIONS = {"relu": nn.ReLU, "silu": nn.SiLU}
PIXELS_255 = ((0.0, 0.0, 0.0), (1 / 255.0,) * 3)  # (mean, std): the model sees 0-255 pixels, as UP's YOLOv6
MAX_MULTIPLE, MAX_BASE = 16.0, 8192  # far above any YOLOv6 (L: 1.0 / 1024); beyond, a typo, not a network
# UP's YOLOv6-n sizes (its net_info); -t and -s change only the two multiples
BASE_REPEATS, BASE_CHANNELS = [1, 6, 12, 18, 6], [64, 128, 256, 512, 1024]
NECK_REPEATS, NECK_CHANNELS = [12, 12, 12, 12], [256, 128, 128, 256, 256, 512]


class RepRetinaPlusModel(RetinaPlusModel):
    """The ATSS RetinaNet on YOLOv6's parts; :meth:`fuse_for_inference` turns its RepVGG
    blocks into single convolutions (what predict and export run)."""

    def fuse_for_inference(self):
        if self.training:
            raise RuntimeError("fuse_for_inference needs eval mode (the BatchNorms' running statistics)")
        return fuse_rep_blocks(self)


def _number(key, value, low, high, integer=False, open_low=False):
    bad = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
    if bad or value > high or value < low or (open_low and value == low):
        kind = "an integer" if integer else "a number"
        raise ConfigError(key, f"must be {kind} in {'(' if open_low else '['}{low:g}, {high:g}], got {value!r}")


def _ints(key, values, n):
    if not (isinstance(values, (list, tuple)) and len(values) == n and all(
            isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_BASE for v in values)):
        raise ConfigError(key, f"expected {n} integers in [1, {MAX_BASE}], got {values!r}")
    return list(values)


def _positives(key, values):
    if not (isinstance(values, (list, tuple)) and values) or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 for v in values):
        raise ConfigError(key, f"expected a non-empty list of positive numbers, got {values!r}")
    return [float(v) for v in values]


def _activation(key, name):
    if name not in ACTIVATIONS:
        raise ConfigError(key, f"{name!r} is not one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def yolov6(num_classes: int = 80, depth_multiple: float = 0.33, width_multiple: float = 0.25,
           backbone_base_repeats: List[int] = BASE_REPEATS, backbone_base_channels: List[int] = BASE_CHANNELS,
           neck_base_repeats: List[int] = NECK_REPEATS, neck_base_channels: List[int] = NECK_CHANNELS,
           in_channels: int = 3, act: str = "relu", head_act: str = "silu", anchor_ratios: List[float] = (1.0,),
           anchor_scales: List[float] = (3.0, 4.0), prior_prob: float = 0.01, top_k: int = 9,
           qfl_beta: float = 2.0, cls_weight: float = 1.0, giou_weight: float = 1.0, l1_weight: float = 1.0,
           iou_weight: float = 1.0, predictor: str = "base", score_thresh: float = 0.05, nms_thresh: float = 0.65,
           pre_nms_top_n: int = 1000, detections_per_img: int = 100):
    """YOLOv6 (UP's ``yolox_v6{n,t,s}_ret_a2_comloc`` recipe): EfficientRep, Rep-PAN, the
    efficient decoupled head with ``anchor_ratios`` x ``anchor_scales`` anchors per point at
    strides 8, 16, 32, ATSS assignment, QFL, GIoU + L1, the IoU branch; 0-255 input."""
    _number("num_classes", num_classes, 1, 100000, integer=True)
    for key, value in (("depth_multiple", depth_multiple), ("width_multiple", width_multiple)):
        _number(key, value, 0, MAX_MULTIPLE, open_low=True)
    sizes = dict(depth_multiple=float(depth_multiple), width_multiple=float(width_multiple),
                 backbone_base_repeats=_ints("backbone_base_repeats", backbone_base_repeats, 5),
                 backbone_base_channels=_ints("backbone_base_channels", backbone_base_channels, 5),
                 neck_base_repeats=_ints("neck_base_repeats", neck_base_repeats, 4),
                 neck_base_channels=_ints("neck_base_channels", neck_base_channels, 6))
    _number("in_channels", in_channels, 1, 64, integer=True)
    ratios, scales = _positives("anchor_ratios", anchor_ratios), _positives("anchor_scales", anchor_scales)
    _number("prior_prob", prior_prob, 0, 1, open_low=True)
    if prior_prob == 1:
        raise ConfigError("prior_prob", "must be in (0, 1), got 1")
    _number("top_k", top_k, 1, 1000, integer=True)
    for key, value in (("qfl_beta", qfl_beta), ("cls_weight", cls_weight), ("giou_weight", giou_weight),
                       ("l1_weight", l1_weight), ("iou_weight", iou_weight)):
        _number(key, value, 0, 1000)
    if predictor not in PREDICTORS:
        raise ConfigError("predictor", f"{predictor!r} is not one of {', '.join(PREDICTORS)}")
    _number("score_thresh", score_thresh, 0, 1)
    _number("nms_thresh", nms_thresh, 0, 1)
    _number("pre_nms_top_n", pre_nms_top_n, 1, 100000, integer=True)
    _number("detections_per_img", detections_per_img, 1, 100000, integer=True)
    channels, repeats = net_info(**sizes)
    backbone = EfficientRep(channels, repeats, in_channels, act=_activation("act", act))
    neck = RepPANNeck(channels, repeats, act=_activation("act", act))
    head = Effidehead(num_classes, list(neck.out_channels), len(ratios) * len(scales), prior_prob,
                      act=_activation("head_act", head_act))
    coder = box_coder()
    criterion = RetinaPlusCriterion(coder, top_k, float(qfl_beta), float(cls_weight), float(giou_weight),
                                    float(l1_weight), True, float(iou_weight))
    post = RetinaPlusPredictor(coder, predictor, float(score_thresh), pre_nms_top_n, pre_nms_top_n,
                               float(nms_thresh), detections_per_img)
    mean, std = PIXELS_255
    return RepRetinaPlusModel(backbone, neck, head, criterion, post, STRIDES,
                              [cell_anchors(s, ratios, scales) for s in STRIDES], class_first=True,
                              image_mean=mean, image_std=std, neck_takes_list=True)
