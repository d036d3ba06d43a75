"""UP's YOLOv6 files (``configs/det/yolov6/yolox_v6{n,t,s}_ret_a2_comloc_400e_640x640*.yaml``):
``EfficientRep`` + ``RepPANNeck`` + ``Effidehead`` + ``retina_post_iou`` ->
:class:`up_trainer.tasks.det.yolov6.RepRetinaPlusModel` (what the native ``yolov6`` entry builds)
on the parts of :mod:`up_trainer.tasks.det.yolov6`, the post-process read as UP's improved RetinaNet's
(:mod:`.atss_net`), as for the YOLOX parts under it (:mod:`.yolox_retina_net`):

- the head's ``anchors`` per grid point must equal ``anchor_ratios`` x ``anchor_scales``; its
  maps are class logits (class-major), box deltas and the IoU-branch logit (the objectness conv);
- the model sees 0-255 pixels, as UP's (``custom_to_tensor``; ``norm_image: true`` gives 0-1);
- UP's parameter names are the model's own (``backbone.ERBlock_2.0.rbr_dense.conv.weight``,
  ``roi_head.cls_preds.0.bias``, ...): UP-trained weights load as they are.

Export writes the re-parameterised form (each RepVGG block one 3x3 conv,
:func:`up_trainer.tasks.det.yolov6.fuse_rep_blocks`).
"""
from functools import partial

from torch import nn

from ...errors import ConfigError, join_path
from .keymap import entry_prefixes
from .options import entry_options, read_activation
from .yolox_net import read_norm
from .yolox_retina_net import retina_plus_on_parts

PARTS = ("EfficientRep", "RepPANNeck", "Effidehead")
BASE = dict(depth_multiple=0.33, width_multiple=0.25, backbone_base_repeats=[1, 6, 12, 18, 6],
            backbone_base_channels=[64, 128, 256, 512, 1024], neck_base_repeats=[12, 12, 12, 12],
            neck_base_channels=[256, 128, 128, 256, 256, 512])  # UP's defaults
LENGTHS = dict(backbone_base_repeats=5, backbone_base_channels=5, neck_base_repeats=4, neck_base_channels=6)



def _norm(opts):
    norm = read_norm(opts)
    return norm, partial(nn.BatchNorm2d, eps=norm.eps, momentum=norm.momentum)


MAX_MULTIPLE, MAX_BASE = 16.0, 8192  # far above any YOLOv6 (L: 1.0 / 1024); beyond, a typo, not a network


def _sizes(opts):
    """UP's net_info inputs: the multipliers and base lists (each part repeats them)."""
    out = {}
    for key, default in BASE.items():
        if key.endswith("multiple"):
            out[key] = opts.take(key, default, types=float, check=lambda v: None if 0 < v <= MAX_MULTIPLE else
                                 f"must be in (0, {MAX_MULTIPLE:g}]")
        else:
            n = LENGTHS[key]
            out[key] = opts.take(key, default, types=list, check=lambda v, n=n: None if len(v) == n and all(
                isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_BASE for x in v) else
                f"expected {n} integers in [1, {MAX_BASE}]")
    return out


def read_backbone(opts):
    from ..det.yolov6 import EfficientRep, net_info

    sizes = _sizes(opts)
    opts.take("out_layers", [2, 3, 4], types=list, only=[2, 3, 4], why="RepPANNeck reads stages 2, 3 and 4")
    opts.take("out_strides", [8, 16, 32], types=list, only=[8, 16, 32], why="the strides of stages 2, 3, 4")
    opts.ignore("inplanes", "UP's EfficientRep does not read it")
    in_channels = opts.take("input_channels", 3, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    norm, bn = _norm(opts)
    act = read_activation(opts, "YOLOv6", "ReLU")
    opts.done()
    channels, repeats = net_info(**sizes)
    return EfficientRep(channels, repeats, in_channels, norm=bn, act=act), sizes, norm


def read_neck(opts, backbone_sizes):
    from ..det.yolov6 import RepPANNeck, net_info

    sizes = _sizes(opts)
    for key, value in sizes.items():
        if value != backbone_sizes[key]:
            raise ConfigError(opts.at(key), f"{value} differs from the backbone's {backbone_sizes[key]}",
                              "the neck's channels follow the backbone's: give both the same")
    opts.ignore("inplanes", "UP's RepPANNeck computes its input channels from the multiples")
    opts.take("out_strides", [8, 16, 32], types=list, only=[8, 16, 32], why="the three levels' strides")
    norm, bn = _norm(opts)
    act = read_activation(opts, "YOLOv6", "ReLU")
    opts.done()
    return RepPANNeck(*net_info(**sizes), norm=bn, act=act), norm


def read_head(opts, planes):
    from ..det.yolov6 import Effidehead

    num_classes = opts.take("num_classes", 81, types=int,
                            check=lambda v: None if v >= 2 else "counts the background too: at least 2")
    anchors = opts.take("anchors", 1, types=int, check=lambda v: None if v >= 1 else
                        "anchors per grid point: an integer >= 1 (UP's anchor lists are not mapped)")
    opts.take("num_layers", 3, types=int, only=3, why="the neck's three levels")
    opts.take("inplanes", planes, types=list, only=planes, why="the neck's output channels")
    opts.take("stride", [8, 16, 32], types=list, only=[8, 16, 32], why="the neck's strides (UP does not read it)")
    opts.take("class_activation", "sigmoid", types=str, only="sigmoid", why="retina_post_iou scores with sigmoids")
    prior = opts.take("prior_prob", 0.01, types=float, check=lambda v: None if 0 < v < 1 else "must be in (0, 1)")
    norm, bn = _norm(opts)
    act = read_activation(opts, "YOLOv6", "Silu")
    opts.done()
    head = Effidehead(num_classes - 1, planes, anchors, prior, norm=bn, act=act)
    return head, num_classes, norm


def build_yolov6_net(net_cfg, path):
    opts = entry_options(net_cfg, path)
    backbone, sizes, bb_norm = read_backbone(opts[0])
    neck, neck_norm = read_neck(opts[1], sizes)
    head, num_classes, head_norm = read_head(opts[2], list(neck.out_channels))
    for norm in (neck_norm, head_norm):
        if norm.sync != bb_norm.sync:
            raise ConfigError(norm.path, "differs from the backbone's normalize in sync_bn",
                              "one batch-norm kind (solo_bn or sync_bn) serves the whole YOLOv6 net")
    from ..det.yolov6 import RepRetinaPlusModel

    model = retina_plus_on_parts(net_cfg, opts, path, backbone, neck, head, num_classes, list(backbone.out_strides),
                                 "anchors", RepRetinaPlusModel)
    model.num_classes_path = join_path(join_path(path, 2), "kwargs.num_classes")
    model.sync_bn_group_size = bb_norm.sync
    model.up_part_names = [e["name"] for e in net_cfg]
    model.translate_up_weights = partial(entry_prefixes, names=model.up_part_names[:3])
    return model
