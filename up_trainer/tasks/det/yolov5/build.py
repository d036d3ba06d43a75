"""``net: {type: yolov5, kwargs: {...}}``: the YOLOv5 model from native kwargs. UP's net lists
(``DarkNetv5`` + ``DarknetPAFPN`` + ``YoloV5Head`` + ``yolov5_post``) are mapped onto these
same kwargs (:mod:`up_trainer.tasks.up_nets.yolov5_net`), so both spellings build one model."""
from typing import List, Optional

from torch import nn

from ....errors import ConfigError
from . import layers
from .model import YoloV5Model
from .nets import DarknetPAFPN, DarkNetv5, YoloV5Head

ACTIVATIONS = ("hardswish", "relu", "silu", "leakyrelu")
STRIDES = [8, 16, 32]
# YOLOv5's published COCO anchors ([w, h] pixels, three per level, levels in stride order)
COCO_ANCHORS = [[10, 13], [16, 30], [33, 23], [30, 61], [62, 45], [59, 119], [116, 90], [156, 198], [373, 326]]


def activation(name, key="act"):
    """The activation constructor for a name of :data:`ACTIVATIONS` (LeakyReLU with slope 0.1)."""
    from functools import partial

    acts = {"hardswish": nn.Hardswish, "relu": nn.ReLU, "silu": nn.SiLU, "leakyrelu": partial(nn.LeakyReLU, 0.1)}
    if name not in acts:
        raise ConfigError(key, f"{name!r} is not one of {', '.join(ACTIVATIONS)}")
    return acts[name]


def _in_range(key, value, low, high):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(key, f"must be in [{low}, {high}], got {value!r}")


def _anchor_pairs(anchors, per_level):
    import torch

    if isinstance(anchors, torch.Tensor):  # the UP reader's placeholder while `up config` checks on meta
        return anchors.float().view(3, per_level, 2)
    if anchors is None:
        if per_level != 3:
            raise ConfigError("anchors", f"required when anchors_per_level is {per_level} (the default anchors "
                              "are YOLOv5's nine COCO ones, three per level)")
        anchors = COCO_ANCHORS
    if not (isinstance(anchors, (list, tuple)) and len(anchors) == 3 * per_level and all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e5 for v in p) for p in anchors)):
        raise ConfigError("anchors", f"expected {3 * per_level} [w, h] pairs of positive pixel sizes "
                          "(anchors_per_level per level, levels in stride order)")
    return torch.tensor(anchors, dtype=torch.float32).view(3, per_level, 2)


def yolov5(num_classes: int = 80, width: int = 32, depths: List[int] = (1, 3, 3, 1), neck_depth: int = 1,
           in_channels: int = 3, act: str = "hardswish", neck_act: Optional[str] = None, yolov5_init: bool = True,
           anchors: Optional[list] = None, anchors_per_level: int = 3,
           loss_weights: List[float] = (0.05, 1.0, 0.5), obj_level_weights: List[float] = (4.0, 1.0, 0.4),
           score_thresh: float = 0.001, nms_thresh: float = 0.6, detections_per_img: int = 300):
    """YOLOv5 (v3/v4 layout, UP's module names): DarkNetv5 (Focus stem, BottleneckCSP stages,
    SPP), DarknetPAFPN, one 1x1 conv per output kind at strides 8, 16, 32; CIoU box loss,
    objectness and class BCE; YOLOv5's decode, per-class NMS."""
    _in_range("num_classes", num_classes, 1, 100000)
    if width % 8 or not 8 <= width <= 1024:
        raise ConfigError("width", f"the stem's channels: a multiple of 8 in [8, 1024], got {width}")
    if not (isinstance(depths, (list, tuple)) and len(depths) == 4 and all(
            isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 64 for n in depths)):
        raise ConfigError("depths", f"expected four integers in [1, 64] (bottlenecks per stage), got {depths!r}")
    for key, value, high in (("neck_depth", neck_depth, 64), ("in_channels", in_channels, 64),
                             ("anchors_per_level", anchors_per_level, 16)):
        _in_range(key, value, 1, high)
    for key, values in (("loss_weights", loss_weights), ("obj_level_weights", obj_level_weights)):
        if not (isinstance(values, (list, tuple)) and len(values) == 3):
            raise ConfigError(key, f"expected three numbers, got {values!r}")
        for v in values:
            _in_range(key, v, 0, 1e3)
    _in_range("score_thresh", score_thresh, 0, 0.999999)
    _in_range("nms_thresh", nms_thresh, 0, 1)
    _in_range("detections_per_img", detections_per_img, 1, 100000)
    pairs = _anchor_pairs(anchors, anchors_per_level)
    backbone = DarkNetv5(width, list(depths), in_channels, act=activation(act))
    neck = DarknetPAFPN(list(backbone.out_channels), neck_depth,
                        act=activation(act if neck_act is None else neck_act, "neck_act"))
    head = YoloV5Head(num_classes, list(neck.out_channels), STRIDES, anchors_per_level)
    if yolov5_init:
        for part in (backbone, neck, head):
            layers.yolov5_init(part)
    return YoloV5Model(backbone, neck, head, pairs,
                       dict(loss_weights=[float(w) for w in loss_weights],
                            obj_layer_weights=[float(w) for w in obj_level_weights]),
                       dict(conf_thres=float(score_thresh), nms_thresh=float(nms_thresh), top_n=detections_per_img))

