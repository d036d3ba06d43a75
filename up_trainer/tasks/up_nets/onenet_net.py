"""UP's OneNet files: resnet + ``FPN`` + ``RetinaHeadWithBN`` / ``RetinaSubNet`` + ``onenet_post`` ->
:class:`up_trainer.tasks.det.atss.RetinaPlusModel` with OneNet's matching, losses and
NMS-free prediction (:mod:`up_trainer.tasks.det.onenet`).

The backbone, FPN and head are read as for UP's improved RetinaNet (:mod:`.atss_net`, so UP's
module names and weights are the same); ``onenet_post``'s kwargs here. Every kwarg is honoured
or refused in one line:

- ``net_type: retina`` (anchors decoded with UP's box coder); ``fcos`` is refused;
- ``cls_loss``: ``quality_focal_loss`` (with ``use_qfl: true``: the matched anchor's soft
  target is its box's IoU) or ``sigmoid_focal_loss`` (``alpha``, ``gamma``); ``loc_loss``:
  ``iou_loss`` with ``loss_type: giou``; ``l1_weight``; ``all_reduce_norm``;
- ``roi_supervisor`` / matcher ``onenet`` (``cost_cls``, ``cost_l1``, ``cost_giou``,
  ``alpha``, ``gamma``; ``easy_match: false``, UP's Hungarian assignment through scipy, is
  refused); ``roi_predictor`` ``onenet`` (``topk_boxes``, ``min_size``).
"""
from ...errors import ConfigError, join_path
from .atss_net import FAMILY, read_trunk_fpn_head, with_up_records
from .options import entry_options, loss_weight, typed_part

HEADS = ("RetinaHeadWithBN", "RetinaSubNet")


def _positive(v):
    return None if v > 0 else "must be > 0"


def read_onenet_post(opts, num_classes):
    """kwargs of the OneNet parts from ``onenet_post``."""
    opts.take("num_classes", num_classes, types=int, only=num_classes, why="the head's num_classes")
    opts.take("net_type", types=str, only="retina", why="the OneNet files' RetinaNet head (fcos is not mapped)")
    opts.ignore("prefix", "a log label")
    use_qfl = opts.take("use_qfl", False, types=bool)
    l1_weight = opts.take("l1_weight", 5.0, types=float, check=lambda v: None if v >= 0 else "must be >= 0")
    num_anchors = opts.take("num_anchors", None, types=int)
    opts.take("norm_on_bbox", False, types=bool, only=False, why="it applies to net_type fcos only")
    all_reduce = opts.take("all_reduce_norm", True, types=bool)
    cfg = opts.sub("cfg")
    for key in ("train", "test"):
        cfg.take(key, None, only=None, why="one setting serves training and evaluation")
    cls_kind, cls = typed_part(cfg, "cls_loss", ("quality_focal_loss", "sigmoid_focal_loss"),
                               "classification loss", family="OneNet")
    if use_qfl != (cls_kind == "quality_focal_loss"):
        raise ConfigError(opts.at("use_qfl"), f"{use_qfl} with {cls_kind} is not mapped",
                          "use_qfl: true with quality_focal_loss, false with sigmoid_focal_loss")
    if cls_kind == "quality_focal_loss":
        cls_fn = ("qfl", dict(beta=cls.take("gamma", 2.0, types=float, check=lambda v: None if v >= 0 else
                                            "must be >= 0")))
        cls.take("use_sigmoid", True, types=bool, only=True)
    else:
        cls.take("num_classes", num_classes, types=int, only=num_classes, why="the head's num_classes")
        cls_fn = ("focal", dict(alpha=cls.take("alpha", 0.25, types=float),
                                gamma=cls.take("gamma", 2.0, types=float, check=lambda v: None if v >= 0 else
                                               "must be >= 0")))
    cls.take("init_prior", 0.01, types=float)  # the head's init_prior sets the bias; the loss does not read it
    cls.take("ignore_index", -1, types=int, only=-1)
    cls.take("dynamic_normalizer", False, types=bool, only=False, why="the losses are divided by the box count")
    cls_weight = loss_weight(cls)
    cls.done()
    _, loc = typed_part(cfg, "loc_loss", ("iou_loss",), "loss", family="OneNet")
    loc.take("loss_type", "iou", types=str, only="giou", why="OneNet's box loss is 1 - GIoU")
    giou_weight = loss_weight(loc)
    loc.done()
    _, gen = typed_part(cfg, "anchor_generator", ("hand_craft",), "anchor generator", family=FAMILY)
    ratios = [float(r) for r in gen.take("anchor_ratios", types=list)]
    scales = [float(s) for s in gen.take("anchor_scales", types=list)]
    gen.take("anchor_strides", None, only=None, why="the strides are the feature pyramid's")
    gen.done()
    _, sup = typed_part(cfg, "roi_supervisor", ("onenet",), "supervisor", family="OneNet")
    _, m = typed_part(sup, "matcher", ("onenet",), "matcher", family="OneNet")
    matcher = dict(cost_cls=m.take("cost_cls", types=float), cost_l1=m.take("cost_l1", types=float),
                   cost_giou=m.take("cost_giou", types=float), alpha=m.take("alpha", 0.25, types=float),
                   gamma=m.take("gamma", 2.0, types=float))
    m.take("easy_match", True, types=bool, only=True,
           why="UP's Hungarian assignment (scipy) is not mapped: each box takes its cheapest anchor")
    m.done(), sup.done()
    _, pred = typed_part(cfg, "roi_predictor", ("onenet",), "predictor", family="OneNet")
    predictor = dict(topk_boxes=pred.take("topk_boxes", 100, types=int, check=_positive),
                     min_size=pred.take("min_size", 0.0, types=float))
    pred.done(), cfg.done(), opts.done()
    if num_anchors is not None and num_anchors != len(ratios) * len(scales):
        raise ConfigError(opts.at("num_anchors"), f"{num_anchors} but anchor_ratios x anchor_scales give "
                          f"{len(ratios) * len(scales)}")
    kind_fn, fn_kwargs = cls_fn
    loss = dict(cls_loss="qfl", qfl_beta=fn_kwargs["beta"]) if kind_fn == "qfl" else \
        dict(cls_loss="focal", focal_alpha=fn_kwargs["alpha"], focal_gamma=fn_kwargs["gamma"])
    return dict(anchor_ratios=ratios, anchor_scales=scales, **loss, cls_weight=cls_weight, giou_weight=giou_weight,
                l1_weight=l1_weight, all_reduce_norm=all_reduce, cost_cls=matcher["cost_cls"],
                cost_l1=matcher["cost_l1"], cost_giou=matcher["cost_giou"], cost_alpha=matcher["alpha"],
                cost_gamma=matcher["gamma"], detections_per_img=predictor["topk_boxes"],
                min_size=predictor["min_size"])


def build_onenet_net(net_cfg, path):
    """UP's ResNet, FPN and head (UP's weight names), ``onenet_post`` mapped onto the native
    ``onenet`` kwargs of :func:`up_trainer.tasks.det.onenet.onenet_on_parts`; the data pipeline
    normalises (no image_mean / image_std in the model)."""
    from ..det.onenet import onenet_on_parts

    opts = entry_options(net_cfg, path)
    kind = net_cfg[0]["type"]
    if net_cfg[2]["type"] not in HEADS:
        raise ConfigError(join_path(join_path(path, 2), "type"), f"{net_cfg[2]['type']} under onenet_post is not "
                          "mapped", "RetinaHeadWithBN or RetinaSubNet")
    trunk, sync, fpn, levels, head, num_classes, head_sync = read_trunk_fpn_head(net_cfg, opts)
    post = read_onenet_post(opts[3], num_classes)
    anchors = len(post["anchor_ratios"]) * len(post["anchor_scales"])
    if anchors != head.num_anchors:
        raise ConfigError(opts[2].at("num_anchors"), f"{head.num_anchors} but anchor_ratios x anchor_scales give "
                          f"{anchors}")
    model = onenet_on_parts(trunk, fpn, head, fpn.out_strides, **post)
    return with_up_records(model, net_cfg, path, kind, trunk, fpn, levels, sync if sync is not None else head_sync)
