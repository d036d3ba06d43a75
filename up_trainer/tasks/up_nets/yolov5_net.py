"""UP's YOLOv5 files (``configs/det/yolov5/yolov5_small_{relu,silu}.yaml``): ``DarkNetv5`` +
``DarknetPAFPN`` + ``YoloV5Head`` + ``yolov5_post`` -> :class:`up_trainer.tasks.det.yolov5.YoloV5Model`.
Every kwarg honoured or refused in one line; UP's module names are the model's (UP-trained
weights load as they are; other entry names are renamed).

The cluster anchors come from ``cfg.anchor_generator.kwargs.base_anchors_file`` (UP's
``anchors.json``: [w, h] pairs, level by level), read when the model is built for training,
prediction or export; ``up config`` checks the net without reading it when the file is not
there (it is data the run needs, like the meta files).
"""
import json
import os
from functools import partial

import torch

from ...errors import ConfigError, join_path
from .keymap import entry_prefixes
from .options import entry_options, read_activation_name, sub_options, typed_part

PARTS = ("DarkNetv5", "DarknetPAFPN", "YoloV5Head", "yolov5_post")
FAMILY = "YOLOv5"
STRIDES = [8, 16, 32]



def _common(opts):
    """normalize (solo_bn only: BatchNorm2d) and initializer (yolov5_init or none) -> init flag."""
    kind, kw = sub_options(opts, "normalize", "normalize", default={"type": "solo_bn"})
    if kind != "solo_bn":
        raise ConfigError(opts.at("normalize.type"), f"{kind!r} is not mapped for YOLOv5", "use solo_bn")
    kw.done()
    init = opts.take("initializer", None, types=(dict, type(None)))
    if init is not None and init != {"method": "yolov5_init"}:
        raise ConfigError(opts.at("initializer"), f"{init} is not mapped for YOLOv5", "use {method: yolov5_init}")
    return init is not None


def _strides(opts, key="out_strides"):
    opts.take(key, STRIDES, types=list, only=STRIDES, why="the three levels at strides 8, 16, 32")


def read_backbone(opts):
    """The backbone's native kwargs (:func:`up_trainer.tasks.det.yolov5.yolov5`) and its init flag."""
    planes = opts.take("init_planes", types=int, check=lambda v: None if 8 <= v <= 1024 and v % 8 == 0 else
                       "a multiple of 8 in [8, 1024]")
    nums = opts.take("csp1_block_nums", types=list, check=lambda v: None if len(v) == 4 and all(
        isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 64 for n in v) else
        "expected four integers in [1, 64] (UP's files; other stage counts are not mapped)")
    in_channels = opts.take("input_channels", 3, types=int, check=lambda v: None if 1 <= v <= 64 else
                            "must be in [1, 64]")
    opts.take("focus_type", "v4_focus", types=str, only="v5_focus",
              why="UP's YOLOv5 files use the v5 Focus stem; v4_focus / stem_focus are not mapped for DarkNetv5")
    opts.take("out_layers", [2, 3, 4], types=list, only=[2, 3, 4], why="DarknetPAFPN takes stages 2, 3, 4")
    _strides(opts)
    act = read_activation_name(opts, "YOLOv5", "Hardswish")
    init = _common(opts)
    opts.done()
    return dict(width=planes, depths=nums, in_channels=in_channels, act=act), init


def read_neck(opts):
    """The neck's native kwargs, its init flag and the ``inplanes`` it was given (checked once built)."""
    planes = opts.take("inplanes", None, types=(list, type(None)))
    nums = opts.take("csp2_block_nums", types=int, check=lambda v: None if 1 <= v <= 64 else "must be in [1, 64]")
    opts.take("num_outs", 3, types=int, only=3, why="extra levels above the backbone's are not mapped")
    opts.take("outplanes", -1, types=(int, list), only=-1, why="the aligning output convs are not mapped")
    opts.take("downsample", "conv", types=str, only="conv", why="no extra levels")
    _strides(opts)
    act = read_activation_name(opts, "YOLOv5", "Hardswish")
    init = _common(opts)
    opts.done()
    return dict(neck_depth=nums, neck_act=act), init, planes


def _levels(opts):
    opts.take("num_level", 3, types=int, only=3, why="the neck's three levels")
    return opts.take("num_anchors_per_level", 3, types=int, check=lambda v: None if 1 <= v <= 16 else
                     "must be in [1, 16]")


def _classes(opts, want=None):
    if want is not None:
        return opts.take("num_classes", want, types=int, only=want, why="the head's num_classes")
    return opts.take("num_classes", types=int, check=lambda v: None if 3 <= v <= 100000 else
                     "counts the background too: at least 3 (UP's one-class mode, 2, is not mapped)")


def read_head(opts):
    num_classes = _classes(opts)
    anchors = _levels(opts)
    planes = opts.take("inplanes", None, types=(list, type(None)))
    _strides(opts)
    init = _common(opts)
    opts.done()
    return dict(num_classes=num_classes - 1, anchors_per_level=anchors), num_classes, init, planes


def _bce(cfg, key):
    kw = typed_part(cfg, key, ("sigmoid_cross_entropy",), "loss", family=FAMILY)[1]
    kw.take("reduction", "none", types=str, only="none", why="yolov5_post reduces the elementwise loss itself")
    kw.take("loss_weight", 1.0, types=float, only=1.0, why="yolov5_post weighs with its loss_weights")
    kw.ignore("name", "a log label")
    kw.done()


def _anchors(cfg, per_level, at):
    kw = typed_part(cfg, "anchor_generator", ("cluster",), "anchor generator", family=FAMILY)[1]
    path = kw.take("base_anchors_file", types=str)
    kw.done()
    if not os.path.isfile(path):
        if torch.empty(0).device.type == "meta":  # up config: the net is checked, the data file read at the run
            return torch.ones(3, per_level, 2)
        raise ConfigError(at, f"{path!r} is not a file", "UP's configs/det/yolov5/anchors.json: [[w, h], ...]")
    try:
        with open(path, encoding="utf-8") as f:
            pairs = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(at, f"{path!r} cannot be read as JSON ({exc})") from None
    if not (isinstance(pairs, list) and len(pairs) == 3 * per_level and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                        and 0 < v < 1e5 for v in p) for p in pairs)):
        raise ConfigError(at, f"{path!r} must hold {3 * per_level} [w, h] pairs of positive pixel sizes "
                          "(num_anchors_per_level per level, levels in stride order)")
    return torch.tensor(pairs, dtype=torch.float32).view(3, per_level, 2)


def _three_weights(v):
    return len(v) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1e3 for x in v)


def read_post(opts, num_classes, per_level):
    _classes(opts, num_classes)
    opts.take("num_anchors_per_level", per_level, types=int, only=per_level, why="the head's")
    opts.take("num_level", 3, types=int, only=3, why="the neck's three levels")
    _strides(opts)
    weights = opts.take("loss_weights", [0.05, 1.0, 0.5], types=list, check=lambda v: None if _three_weights(v) else
                        "expected [box, obj, cls] numbers in [0, 1000]")
    layer = opts.take("obj_loss_layer_weights", [4.0, 1.0, 0.4], types=list, check=lambda v: None if
                      _three_weights(v) else "expected three numbers in [0, 1000], one per level")
    opts.ignore("initializer", "UP's yolov5_post has no parameters to initialise")
    opts.ignore("prefix", "a log label")
    cfg = opts.sub("cfg")
    anchors = _anchors(cfg, per_level, cfg.at("anchor_generator.kwargs.base_anchors_file"))
    if not isinstance(anchors, torch.Tensor):
        anchors = anchors.view(-1, 2).tolist()
    sup = typed_part(cfg, "roi_supervisor", ("yolov5",), "roi_supervisor", family=FAMILY)[1]
    sup.ignore("strides", "UP's yolov5_post replaces the supervisor's kwargs")
    sup.ignore("num_classes", "UP's yolov5_post replaces the supervisor's kwargs")
    sup.done()
    pred = typed_part(cfg, "roi_predictor", ("yolov5",), "roi_predictor", family=FAMILY)[1]
    pred.ignore("roi_min_size", "UP's yolov5 predictor does not read it")
    conf = pred.take("conf_thres", 0.001, types=float, check=lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
    merger = typed_part(pred, "merger", ("yolov5",), "merger", family=FAMILY)[1]
    top_n = merger.take("top_n", 300, types=int, check=lambda v: None if 1 <= v <= 100000 else "must be in [1, 100000]")
    nms = merger.take("nms", types=dict)
    if set(nms) - {"type", "nms_iou_thresh"} or nms.get("type", "naive") != "naive" or isinstance(
            nms.get("nms_iou_thresh"), bool) or not isinstance(nms.get("nms_iou_thresh"), (int, float)) or \
            not 0 <= nms["nms_iou_thresh"] <= 1:
        raise ConfigError(merger.at("nms"), f"{nms} is not mapped",
                          "expected {type: naive, nms_iou_thresh: x in [0, 1]}")
    merger.done()
    pred.done()
    _bce(cfg, "obj_loss")
    _bce(cfg, "cls_loss")
    box = typed_part(cfg, "box_loss", ("iou_loss",), "loss", family=FAMILY)[1]
    box.take("loss_type", "ciou", types=str, only="ciou", why="UP's YOLOv5 files train with CIoU")
    box.take("reduction", "none", types=str, only="none", why="yolov5_post reduces the elementwise loss itself")
    box.take("loss_weight", 1.0, types=float, only=1.0, why="yolov5_post weighs with its loss_weights")
    box.ignore("name", "a log label")
    box.done()
    cfg.done()
    opts.done()
    return dict(anchors=anchors, loss_weights=[float(w) for w in weights], obj_level_weights=[float(w) for w in layer],
                score_thresh=conf, nms_thresh=float(nms["nms_iou_thresh"]), detections_per_img=top_n)


def _given_planes(opts, given, built):
    """UP's optional ``inplanes``: only what the previous part gives."""
    if given is not None and given != built:
        raise ConfigError(opts.at("inplanes"), f"{given!r} is not supported for UP's {opts.what}; only {built!r}",
                          "the previous part's output channels")


def build_yolov5_net(net_cfg, path):
    """UP's kwargs mapped onto the native ``yolov5`` entry's, which builds the model."""
    from ..det.yolov5 import yolov5, yolov5_init

    opts = entry_options(net_cfg, path)
    native, init_b = read_backbone(opts[0])
    neck_kwargs, init_n, neck_planes = read_neck(opts[1])
    head_kwargs, num_classes, init_h, head_planes = read_head(opts[2])
    post = read_post(opts[3], num_classes, head_kwargs["anchors_per_level"])
    if neck_kwargs["neck_act"] == native["act"]:
        neck_kwargs["neck_act"] = None
    inits = (init_b, init_n, init_h)
    model = yolov5(**native, **neck_kwargs, **head_kwargs, **post, yolov5_init=all(inits))
    _given_planes(opts[1], neck_planes, list(model.backbone.out_channels))
    _given_planes(opts[2], head_planes, list(model.neck.out_channels))
    if not all(inits):  # UP initialises part by part
        for part, init in zip((model.backbone, model.neck, model.roi_head), inits):
            if init:
                yolov5_init(part)
    model.num_classes_counts_background = True
    model.num_classes_path = join_path(join_path(path, 2), "kwargs.num_classes")
    model.sync_bn_group_size = None
    model.up_part_names = [e["name"] for e in net_cfg]
    model.translate_up_weights = partial(entry_prefixes, names=model.up_part_names[:3])
    return model
