"""UP's FCOS net lists mapped onto :mod:`up_trainer.tasks.det.fcos`: resnet + ``FPN`` +
``FcosHead`` + ``fcos_post`` -> :class:`~up_trainer.tasks.det.fcos.FcosModel`. Every kwarg is
honoured or refused in one line with its path (docs/up/two_stage.rst); the model carries UP's
entry names as its children (``backbone``, ``neck``, ``roi_head``)."""
from functools import partial

from ...errors import ConfigError
from .backbones import build_resnet
from .det_net import read_fpn, up_model_attrs
from .det_readers import _nms_thresh
from .keymap import backbone_rules, fpn_rules, translate
from .layers import initialize, norm_layer, read_initializer
from .options import entry_options, loss_weight, read_num_classes, same_value, typed_part


def _ranges(value):
    ok = isinstance(value, list) and all(isinstance(r, list) and len(r) == 2 and
                                         all(isinstance(v, (int, float)) for v in r) for r in value)
    return None if ok else "expected a list of [low, high] pairs"


def read_fcos_head(opts, fpn):
    """The head's kwargs of :func:`up_trainer.tasks.det.fcos.fcos_on_trunk`, the class count
    (with the background), the ranges and UP's initializer (applied once the head is built)."""
    levels = len(fpn.out_strides)
    opts.take("inplanes", fpn.out_channels, types=(list, int))
    num_conv = opts.take("num_conv", 4, types=int, check=lambda v: None if v >= 0 else "must be >= 0")
    feat = opts.take("feat_planes", 256, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    n = read_num_classes(opts)
    same_value(opts, "dense_points", 1, "one point per cell (UP's dense_points > 1 variant is not mapped)")
    ranges = opts.take("loc_ranges", types=list, check=lambda v: _ranges(v) or (
        None if len(v) == levels else f"{len(v)} ranges for {levels} pyramid levels"))
    same_value(opts, "class_activation", "sigmoid", "FCOS scores classes with sigmoids")
    prior = opts.take("init_prior", 0.01, types=float, check=lambda v: None if 0 < v < 1 else "must be in (0, 1)")
    init = read_initializer(opts)
    if opts.kwargs.get("normalize") is None:  # UP's default: plain convolutions
        norm = opts.take("normalize", None)
    else:
        norm = norm_layer(opts)[0]
    same_value(opts, "has_mask", False, "no instance masks: boxes only (CondInst is not mapped)")
    opts.done()
    return dict(num_classes=n - 1, head_channels=feat, head_convs=num_conv, norm=norm, prior_prob=prior,
                loc_ranges=ranges), n, ranges, init


def read_fcos_post(opts, n, ranges):
    """The targets', losses' and decode's kwargs of :func:`up_trainer.tasks.det.fcos.fcos_on_trunk`."""
    same_value(opts, "num_classes", n, "the head's num_classes")
    same_value(opts, "dense_points", 1, "one point per cell")
    opts.take("loc_ranges", ranges, types=list, only=ranges, why="the head's loc_ranges")
    same_value(opts, "has_mask", False, "no instance masks: boxes only")
    opts.ignore("prefix", "a log label")
    cfg = opts.sub("cfg")
    for key in ("train", "test"):
        cfg.take(key, None, only=None, why="one setting serves training and evaluation")
    loc = typed_part(cfg, "loc_loss", ("iou_loss",), "localisation loss")[1]
    loc.take("loss_type", "iou", types=str, only="giou", why="torchvision's generalized_box_iou_loss")
    loc_weight = loss_weight(loc)
    loc.done()
    focal = typed_part(cfg, "cls_loss", ("sigmoid_focal_loss",), "classification loss")[1]
    same_value(focal, "num_classes", n, "the head's num_classes")
    alpha, gamma = focal.take("alpha", 0.25, types=float), focal.take("gamma", 2.0, types=float)
    focal.take("init_prior", 0.01, types=float)  # UP's bias init, done by the head
    focal.take("ignore_index", -1, only=-1)
    focal.take("dynamic_normalizer", False, only=False)
    cls_weight = loss_weight(focal)
    focal.done()
    center = typed_part(cfg, "center_loss", ("sigmoid_cross_entropy",), "centerness loss")[1]
    center_weight = loss_weight(center)
    center.done()
    gen = typed_part(cfg, "center_generator", ("fcos",), "point generator")[1]
    same_value(gen, "dense_points", 1, "one point per cell")
    same_value(gen, "center", True, "FCOS's points are the cells' centres")
    gen.done()
    sup = typed_part(cfg, "fcos_supervisor", ("fcos",), "supervisor")[1]
    norm_on_bbox = sup.take("norm_on_bbox", False, types=bool)
    sup.ignore("mask_out_stride", "masks only")
    matcher = typed_part(sup, "matcher", ("fcos",), "matcher")[1]
    center_sample = matcher.take("center_sample", False, types=(bool, type(None))) or False
    radius = matcher.take("pos_radius", 1.0, types=float, check=lambda v: None if v > 0 else "must be > 0")
    matcher.done(), sup.done()
    pred = typed_part(cfg, "fcos_predictor", ("fcos",), "predictor")[1]
    pred.take("norm_on_bbox", False, types=bool, only=norm_on_bbox, why="the supervisor's norm_on_bbox")
    score = pred.take("pre_nms_score_thresh", types=float, check=lambda v: None if 0 <= v <= 1 else "must be in [0, 1]")
    top = pred.take("pre_nms_top_n", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    pred.take("post_nms_top_n", top, types=int, check=lambda v: None if v >= top else
              "below pre_nms_top_n is not mapped (without NMS before the merger it is the same cap)")
    pred.take("roi_min_size", 0, only=0, why="boxes of any size are kept")
    pred.take("clip_box", True, only=True)
    pred.take("nms", None, only=None, why="NMS runs once, in the merger")
    pred.take("all_in_one", False, only=False)
    merger = typed_part(pred, "merger", ("retina",), "merger")[1]
    per_img = merger.take("top_n", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    nms = _nms_thresh(merger)
    merger.done(), pred.done(), cfg.done(), opts.done()
    return dict(center_sample=center_sample, pos_radius=radius, norm_on_bbox=norm_on_bbox, focal_alpha=alpha,
                focal_gamma=gamma, cls_weight=cls_weight, giou_weight=loc_weight, centerness_weight=center_weight,
                score_thresh=score, pre_nms_top_n=top, nms_thresh=nms, detections_per_img=per_img)


def build_fcos_net(net_cfg, path):
    """UP's ResNet and FPN (UP's weight names), the rest mapped onto the native ``up_fcos`` kwargs."""
    from ..det.fcos import fcos_on_trunk

    opts = entry_options(net_cfg, path)
    trunk, sync = build_resnet(net_cfg[0]["type"], opts[0])
    if trunk.out_layers != list(range(trunk.out_layers[0], 5)):
        raise ConfigError(opts[0].at("out_layers"), f"{trunk.out_layers}: an FPN needs consecutive stages up to 4")
    fpn = read_fpn(opts[1], trunk)
    head, n, ranges, init = read_fcos_head(opts[2], fpn)
    post = read_fcos_post(opts[3], n, ranges)
    model = fcos_on_trunk(trunk, fpn, fpn.out_channels, fpn.out_strides, **head, **post)
    initialize(model.roi_head, init)
    model.roi_head.init_prior()
    up_model_attrs(model, net_cfg, path, 2, sync)
    n_in = len(trunk.out_layers)
    names = model.up_part_names
    model.translate_up_weights = partial(translate, parts={
        names[0]: backbone_rules(net_cfg[0]["type"]),
        names[1]: fpn_rules(fpn.up_start_level, n_in, len(fpn.out_strides) - n_in)})
    return model


