"""UP's FCOS and two-stage variants mapped onto :mod:`up_trainer.tasks.det.rcnn_plus`.

* resnet + ``FPN`` + ``FcosHead`` + ``fcos_post`` -> :class:`~..det.rcnn_plus.FcosModel`.

Every kwarg is honoured or refused in one line with its path (README, "Coming from UP").
The models carry UP's entry names as their children (``backbone``, ``neck``, ``roi_head``).
"""
from functools import partial

from ...errors import ConfigError, join_path
from .backbones import build_resnet
from .det_net import read_fpn
from .det_readers import _nms_thresh, _one_type
from .keymap import backbone_rules, fpn_rules, translate
from .layers import initialize, norm_layer, read_initializer
from .options import Options

FCOS_PARTS = ("FPN", "FcosHead", "fcos_post")
IOU_LOSSES = ("giou",)


def _entry_options(net_cfg, path):
    return [Options(e.get("kwargs"), join_path(join_path(path, i), "kwargs"), e["type"]) for i, e in enumerate(net_cfg)]


def _same(opts, key, value, why):
    opts.take(key, value, types=type(value), only=value, why=why)


def _classes(opts):
    return opts.take("num_classes", types=int, check=lambda v: None if v >= 2 else
                     "counts the background too: at least 2")


def _weight(kw):
    weight = kw.take("loss_weight", 1.0, types=float)
    kw.take("reduction", "mean", only="mean")
    kw.ignore("name", "a log label")
    return weight


def _ranges(value):
    ok = isinstance(value, list) and all(isinstance(r, list) and len(r) == 2 and
                                         all(isinstance(v, (int, float)) for v in r) for r in value)
    return None if ok else "expected a list of [low, high] pairs"


# -- FCOS ----------------------------------------------------------------------------------------
def read_fcos_head(opts, fpn):
    from ..det.rcnn_plus import FcosHead

    levels = len(fpn.out_strides)
    opts.take("inplanes", fpn.out_channels, types=(list, int))
    num_conv = opts.take("num_conv", 4, types=int, check=lambda v: None if v >= 0 else "must be >= 0")
    feat = opts.take("feat_planes", 256, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    n = _classes(opts)
    _same(opts, "dense_points", 1, "one point per cell (UP's dense_points > 1 variant is not mapped)")
    ranges = opts.take("loc_ranges", types=list, check=lambda v: _ranges(v) or (
        None if len(v) == levels else f"{len(v)} ranges for {levels} pyramid levels"))
    _same(opts, "class_activation", "sigmoid", "FCOS scores classes with sigmoids")
    prior = opts.take("init_prior", 0.01, types=float, check=lambda v: None if 0 < v < 1 else "must be in (0, 1)")
    init = read_initializer(opts)
    if opts.kwargs.get("normalize") is None:  # UP's default: plain convolutions
        norm = opts.take("normalize", None)
    else:
        norm = norm_layer(opts)[0]
    _same(opts, "has_mask", False, "no instance masks: boxes only (CondInst is not mapped)")
    opts.done()
    head = FcosHead(fpn.out_channels, n - 1, levels, feat, num_conv, norm, prior)
    initialize(head, init)
    head.init_prior()
    return head, n, ranges


def _typed(cfg, key, allowed, what):
    return _one_type(cfg, key, allowed, what)[1]


def read_fcos_post(opts, n, ranges, strides):
    from ..det.rcnn_plus import FcosCriterion, FcosPostprocess

    _same(opts, "num_classes", n, "the head's num_classes")
    _same(opts, "dense_points", 1, "one point per cell")
    opts.take("loc_ranges", ranges, types=list, only=ranges, why="the head's loc_ranges")
    _same(opts, "has_mask", False, "no instance masks: boxes only")
    opts.ignore("prefix", "a log label")
    cfg = opts.sub("cfg")
    for key in ("train", "test"):
        cfg.take(key, None, only=None, why="one setting serves training and evaluation")
    loc = _typed(cfg, "loc_loss", ("iou_loss",), "localisation loss")
    loc.take("loss_type", "iou", types=str, only="giou", why="torchvision's generalized_box_iou_loss")
    loc_weight = _weight(loc)
    loc.done()
    focal = _typed(cfg, "cls_loss", ("sigmoid_focal_loss",), "classification loss")
    _same(focal, "num_classes", n, "the head's num_classes")
    alpha, gamma = focal.take("alpha", 0.25, types=float), focal.take("gamma", 2.0, types=float)
    focal.take("init_prior", 0.01, types=float)  # UP's bias init, done by the head
    focal.take("ignore_index", -1, only=-1)
    focal.take("dynamic_normalizer", False, only=False)
    cls_weight = _weight(focal)
    focal.done()
    center = _typed(cfg, "center_loss", ("sigmoid_cross_entropy",), "centerness loss")
    center_weight = _weight(center)
    center.done()
    gen = _typed(cfg, "center_generator", ("fcos",), "point generator")
    _same(gen, "dense_points", 1, "one point per cell")
    _same(gen, "center", True, "FCOS's points are the cells' centres")
    gen.done()
    sup = _typed(cfg, "fcos_supervisor", ("fcos",), "supervisor")
    norm_on_bbox = sup.take("norm_on_bbox", False, types=bool)
    sup.ignore("mask_out_stride", "masks only")
    matcher = _typed(sup, "matcher", ("fcos",), "matcher")
    center_sample = matcher.take("center_sample", False, types=(bool, type(None))) or False
    radius = matcher.take("pos_radius", 1.0, types=float, check=lambda v: None if v > 0 else "must be > 0")
    matcher.done(), sup.done()
    pred = _typed(cfg, "fcos_predictor", ("fcos",), "predictor")
    pred.take("norm_on_bbox", False, types=bool, only=norm_on_bbox, why="the supervisor's norm_on_bbox")
    score = pred.take("pre_nms_score_thresh", types=float, check=lambda v: None if 0 <= v <= 1 else "must be in [0, 1]")
    top = pred.take("pre_nms_top_n", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    pred.take("post_nms_top_n", top, types=int, check=lambda v: None if v >= top else
              "below pre_nms_top_n is not mapped (without NMS before the merger it is the same cap)")
    pred.take("roi_min_size", 0, only=0, why="boxes of any size are kept")
    pred.take("clip_box", True, only=True)
    pred.take("nms", None, only=None, why="NMS runs once, in the merger")
    pred.take("all_in_one", False, only=False)
    merger = _typed(pred, "merger", ("retina",), "merger")
    per_img = merger.take("top_n", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    nms = _nms_thresh(merger)
    merger.done(), pred.done(), cfg.done(), opts.done()
    criterion = FcosCriterion(strides, ranges, alpha, gamma, radius, center_sample, norm_on_bbox,
                              cls_weight, loc_weight, center_weight)
    return criterion, FcosPostprocess(strides, score, top, nms, per_img, norm_on_bbox)


def build_fcos_net(net_cfg, path):
    from ..det.rcnn_plus import FcosModel

    opts = _entry_options(net_cfg, path)
    trunk, sync = build_resnet(net_cfg[0]["type"], opts[0])
    if trunk.out_layers != list(range(trunk.out_layers[0], 5)):
        raise ConfigError(opts[0].at("out_layers"), f"{trunk.out_layers}: an FPN needs consecutive stages up to 4")
    fpn = read_fpn(opts[1], trunk)
    head, n, ranges = read_fcos_head(opts[2], fpn)
    criterion, post = read_fcos_post(opts[3], n, ranges, fpn.out_strides)
    model = FcosModel(trunk, fpn, head, criterion, post, fpn.out_strides)
    _up_attrs(model, net_cfg, path, 2, sync)
    n_in = len(trunk.out_layers)
    names = model.up_part_names
    model.translate_up_weights = partial(translate, parts={
        names[0]: backbone_rules(net_cfg[0]["type"]),
        names[1]: fpn_rules(fpn.up_start_level, n_in, len(fpn.out_strides) - n_in)})
    return model


def _up_attrs(model, net_cfg, path, classes_entry, sync):
    model.num_classes_counts_background = True
    model.num_classes_path = join_path(join_path(path, classes_entry), "kwargs.num_classes")
    model.sync_bn_group_size = sync
    model.up_part_names = [e["name"] for e in net_cfg]
