"""UP's YOLOX backbones and neck under the ATSS RetinaNet's post-process (UP's
``configs/det/retinanet/yolox_*_ret_a*_comloc*.yaml`` and the EFL YOLOX files).

``yolox_nano|tiny|s|m|l|x`` / ``yolox`` / resnet + ``YoloxPAFPN`` + ``YoloXHead`` +
``retina_post_iou`` -> :class:`up_trainer.tasks.det.atss.RetinaPlusModel` built from the YOLOX
parts (:mod:`up_trainer.tasks.det.yolox`): the backbone, neck and head are read as for UP's
YOLOX files (:mod:`.yolox_net`), the post-process as for UP's improved RetinaNet
(:mod:`.atss_net`). What changes, as in UP:

- the head's ``num_point`` anchors sit on every grid point (``anchor_ratios`` x
  ``anchor_scales`` of the post-process's hand-crafted anchors must give the same count);
- the head's three maps are read as class logits (class-major, UP's ``class_first``), box
  deltas of those anchors and the IoU-branch logit (YOLOX's objectness conv): so
  ``retina_post`` (no IoU branch) is refused with this head;
- the model sees 0-255 pixels, as UP's YOLOX does (``custom_to_tensor`` without norm_image).

This module only assembles; the YOLOX and ATSS packages stay apart.
"""
from ...errors import ConfigError, join_path
from .atss_net import efl_module, read_post
from .options import entry_options
from .yolox_net import read_parts, up_weight_translation

PIXELS_255 = ((0.0, 0.0, 0.0), (1 / 255.0,) * 3)  # (mean, std): the model's input x 255


def build_yolox_retina_net(net_cfg, path):
    opts = entry_options(net_cfg, path)
    kind = net_cfg[0]["type"]
    backbone, neck, head, num_classes, strides, norm = read_parts(kind, opts, anchored=True)
    model = retina_plus_on_parts(net_cfg, opts, path, backbone, neck, head, num_classes, strides, "num_point")
    model.num_classes_path = join_path(join_path(path, 2), "kwargs.num_classes")
    model.sync_bn_group_size = norm.sync
    model.up_part_names = [e["name"] for e in net_cfg]
    model.translate_up_weights = up_weight_translation(kind, model.up_part_names)
    return model


def retina_plus_on_parts(net_cfg, opts, path, backbone, neck, head, num_classes, strides, anchors_key,
                         model_class=None):
    """The ATSS RetinaNet (``model_class``, default RetinaPlusModel) on a YOLO family's
    backbone, neck and anchored head, with entry 3's ``retina_post_iou`` as its post-process and
    0-255 input; ``anchors_key``: the head kwarg that says its anchors per point."""
    from ..det.anchor_losses import RetinaPlusCriterion
    from ..det.anchor_model import RetinaPlusModel
    from ..det.anchor_predict import RetinaPlusPredictor
    from ..det.box_ops import box_coder
    from .det_parts import up_cell_anchors

    post = read_post(net_cfg[3]["type"], opts[3], num_classes, True, join_path(join_path(path, 3), "type"))
    anchors = len(post["ratios"]) * len(post["scales"])
    if anchors != head.num_point:
        raise ConfigError(opts[2].at(anchors_key), f"{head.num_point} but anchor_ratios x anchor_scales give "
                          f"{anchors}")
    coder = box_coder()
    criterion = RetinaPlusCriterion(coder, post["top_k"], post["beta"], post["cls_weight"], post["giou_weight"],
                                    post["l1_weight"], True, post["iou_weight"],
                                    cls_loss=efl_module(post, num_classes, len(strides)),
                                    dynamic_norm=post["dynamic_norm"])
    cells = [up_cell_anchors(s, post["ratios"], post["scales"]) for s in strides]
    mean, std = PIXELS_255
    model = (model_class or RetinaPlusModel)(backbone, neck, head, criterion,
                                             RetinaPlusPredictor(coder, **post["predictor"]), strides, cells,
                                             class_first=post["class_first"], image_mean=mean, image_std=std,
                                             neck_takes_list=True)
    model.num_classes_counts_background = True
    return model
