"""Bad kwargs of the native net types of the families UP's files reach (yolov5, yolov6, up_fcos, onenet,
faster_rcnn_c4, rfcn, cascade_rcnn): ``up config`` stops in one line naming the kwarg, exit 2,
before any data is read."""
import os

import pytest
import yaml

from conftest import REPO, invoke
from hostile_helpers import assert_one_line, write_yaml

CONFIGS = {"yolov5": "digits_yolov5", "yolov6": "digits_yolov6", "up_fcos": "digits_up_fcos", "onenet": "digits_onenet",
           "cascade_rcnn": "digits_cascade_rcnn"}


def config_with(tmp_path, net_type, **kwargs):
    with open(os.path.join(REPO, "configs", "det", f"{CONFIGS.get(net_type, 'digits_cascade_rcnn')}.yaml"),
              encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg.pop("to_input", None)  # a YAML anchor's holder, expanded where it is used
    if net_type not in CONFIGS:  # faster_rcnn_c4 / rfcn: the family's config with the other type
        cfg["net"] = {"type": net_type, "kwargs": {"num_classes": 10, "backbone": "resnet50"}}
    cfg["net"]["kwargs"].update(kwargs)
    return write_yaml(tmp_path / "cfg.yaml", cfg)


@pytest.mark.parametrize("net_type, kwargs, fragments", [
    ("yolov5", {"width": "wide"}, ["net.kwargs.width: expected int, got str"]),
    ("yolov5", {"depths": [1, 3, 3]}, ["net.kwargs.depths: expected four integers in [1, 64]"]),
    ("yolov5", {"anchors": [[10, 13], [16, -30]]}, ["net.kwargs.anchors: expected 9 [w, h] pairs"]),
    ("yolov5", {"act": "tanh"}, ["net.kwargs.act: 'tanh' is not one of hardswish, relu, silu, leakyrelu"]),
    ("yolov5", {"loss_weights": [1, 2]}, ["net.kwargs.loss_weights: expected three numbers"]),
    ("yolov6", {"depth_multiple": "deep"}, ["net.kwargs.depth_multiple: expected float/int, got str"]),
    ("yolov6", {"neck_base_channels": [256, 128, 128]}, ["net.kwargs.neck_base_channels: expected 6 integers"]),
    ("yolov6", {"anchor_scales": [3, -4]}, ["net.kwargs.anchor_scales: expected a non-empty list of positive"]),
    ("yolov6", {"head_act": "gelu"}, ["net.kwargs.head_act: 'gelu' is not one of relu, silu"]),
    ("yolov6", {"predictor": "soft_nms"}, ["net.kwargs.predictor: 'soft_nms' is not one of base, base_multicls"]),
    ("yolov6", {"top_k": 0}, ["net.kwargs.top_k: must be an integer in [1, 1000], got 0"]),
    ("up_fcos", {"loc_ranges": [[-1, 16]]}, ["net.kwargs.loc_ranges: expected 2 [low, high] pairs"]),
    ("up_fcos", {"head_norm": "ln"}, ["net.kwargs.head_norm: 'ln' is not one of none, gn, bn"]),
    ("up_fcos", {"head_channels": 48, "head_norm": "gn"}, ["net.kwargs.head_channels: 48: head_norm gn"]),
    ("onenet", {"anchor_scales": []}, ["net.kwargs.anchor_scales: expected a non-empty list of positive numbers"]),
    ("onenet", {"cls_loss": "softmax"}, ["net.kwargs.cls_loss: 'softmax' is not one of qfl, focal"]),
    ("onenet", {"detections_per_img": 0}, ["net.kwargs.detections_per_img: must be an integer >= 1"]),
    ("cascade_rcnn", {"roi_levels": 5}, ["net.kwargs.roi_levels: must be an integer in [1, 3]"]),
    ("cascade_rcnn", {"stage_stds": [[0.1, 0.1, 0.2, 0.2]]}, ["net.kwargs.stage_stds: 1 values for the 3 stages"]),
    ("cascade_rcnn", {"rpn_pre_nms_top_n": [600, 300, 100]}, ["net.kwargs.rpn_pre_nms_top_n: expected an integer"]),
    ("cascade_rcnn", {"rpn_fg_iou": 1.5}, ["net.kwargs.rpn_fg_iou: must be in [0, 1], got 1.5"]),
    ("faster_rcnn_c4", {"pool_size": 10}, ["net.kwargs.pool_size: expected 7 or 14, got 10"]),
    ("faster_rcnn_c4", {"backbone": "resnet152"}, ["net.kwargs.backbone: 'resnet152' is not one of resnet18"]),
    ("rfcn", {"backbone": "resnet18"}, ["net.kwargs.backbone: 'resnet18': R-FCN dilates stage 5"]),
])
def test_a_bad_native_kwarg_is_one_line_naming_it(tmp_path, net_type, kwargs, fragments):
    res = invoke(["config", "--config", config_with(tmp_path, net_type, **kwargs)])
    assert_one_line(res, *fragments)
