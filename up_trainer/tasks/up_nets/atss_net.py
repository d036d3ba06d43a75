"""UP's improved RetinaNet net lists assembled from :mod:`up_trainer.tasks.det.atss`.

resnet + ``FPN`` + ``RetinaHeadWithBN`` / ``RetinaHeadWithIOU`` / ``RetinaHeadWithBNIOU`` +
``retina_post`` / ``retina_post_iou`` (with the ``atss`` supervisor, or ``retina_ota`` with
SimOTA for ``retina_post``) -> :class:`RetinaPlusModel`.
Every kwarg of those entries is honoured or refused in one line naming it, with UP's defaults
where a file leaves one out:

- ``RetinaHeadWithBN`` / ``RetinaHeadWithBNIOU``: tower convs shared by all levels, a norm per
  level (``normalize``, BatchNorm by default); ``RetinaHeadWithBNSep`` (UP's quantization
  files): the same with convs of their own per level too; ``RetinaHeadWithIOU``: one tower for all levels,
  plain or with the given norm; the ``*IOU`` heads add the IoU branch, which needs
  ``retina_post_iou`` (and that post-process needs an IoU head);
- ``retina_post_iou`` lays the class channels out class-major (UP's ``class_first``), so
  UP-trained weights load unchanged;
- ``num_classes`` counts the background (81 for COCO); the model predicts ``num_classes - 1``.
"""
from functools import partial

from ...errors import ConfigError, join_path
from .det_net import read_fpn
from .keymap import backbone_rules, fpn_rules, translate
from .layers import initialize, norm_layer, read_initializer
from .options import Options, entry_options, loss_weight, read_num_classes, typed_part

HEADS = {"RetinaHeadWithBN": (True, False), "RetinaHeadWithIOU": (False, True),
         "RetinaHeadWithBNIOU": (True, True),
         "RetinaSubNet": (False, False)}  # type -> (norm per level, IoU branch); RetinaSubNet: OneNet's only
HEADS["RetinaHeadWithBNSep"] = (True, False)  # as RetinaHeadWithBN, with convs of its own per level
UNSHARED_CONV_HEADS = ("RetinaHeadWithBNSep",)
POSTS = ("retina_post", "retina_post_iou")
EFL_TYPES = ("equalized_focal_loss", "equalized_quality_focal_loss")
FAMILY = "the ATSS RetinaNet"  # in refusals: "UP loss 'x' is not mapped for ..."


def _classes(opts, key="num_classes", want=None):
    if want is not None:
        return opts.take(key, want, types=int, only=want, why="the head's num_classes")
    return read_num_classes(opts, key)


# -- the head --------------------------------------------------------------------------------
def read_head(kind, opts, channels, levels):
    from ..det.atss import RetinaPlusHead

    per_level, iou = HEADS[kind]
    opts.take("inplanes", channels, types=(int, list), check=lambda v: None if v == channels or (
        isinstance(v, list) and v and all(c == channels for c in v)) else f"the FPN gives {channels} channels")
    feat = opts.take("feat_planes", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    num_classes = _classes(opts)
    norm, sync = None, None
    if per_level or opts.kwargs.get("normalize") is not None:
        norm, sync = norm_layer(opts)
    else:
        opts.take("normalize", None)
    init = read_initializer(opts)
    num_conv = opts.take("num_conv", 4, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    opts.take("num_level", 5, types=int, only=levels, why=f"the FPN gives {levels} levels")
    opts.take("class_activation", "sigmoid", types=str, only="sigmoid", why="QFL scores classes with sigmoids")
    prior = opts.take("init_prior", 0.01, types=float, check=lambda v: None if 0 < v < 1 else "must be in (0, 1)")
    num_anchors = opts.take("num_anchors", 1 if kind == "RetinaHeadWithIOU" else 9, types=int,
                            check=lambda v: None if v >= 1 else "must be >= 1")
    opts.take("share_subnet", False, types=bool, only=False,
              why="one tower for classes and boxes is not mapped (UP's IoU heads cannot run with it)")
    opts.take("share_location", True, types=bool, only=True, why="one box per anchor, shared by all classes")
    opts.done()
    head = RetinaPlusHead(channels, num_classes - 1, num_anchors, levels, feat, num_conv, norm,
                          norm_per_level=per_level, iou_branch=iou, prior=prior,
                          share_level_convs=kind not in UNSHARED_CONV_HEADS)
    if init is not None:  # UP initialises the whole head, then sets the class prior bias again
        initialize(head, init)
        head.init_prior(prior)
    return head, num_classes, sync


# -- the post-process ------------------------------------------------------------------------
def _loc_terms(cfg):
    """(giou weight, l1 weight) of ``loc_loss``: iou_loss (giou) or compose_loc_loss of them + l1_loss."""
    kind, kw = typed_part(cfg, "loc_loss", ("iou_loss", "compose_loc_loss"), "loss", family=FAMILY)
    if kind == "iou_loss":
        terms = [(kind, kw)]
    else:
        kw.ignore("name", "a log label")
        entries = kw.take("loss_cfg", types=list, check=lambda v: None if v else "needs at least one loss")
        kw.done()
        terms = []
        for i, entry in enumerate(entries):
            at = join_path(kw.at("loss_cfg"), i)
            if not isinstance(entry, dict) or set(entry) - {"type", "kwargs"} or "type" not in entry:
                raise ConfigError(at, f"expected {{type, kwargs}}, got {entry!r}")
            if entry["type"] not in ("iou_loss", "l1_loss"):
                raise ConfigError(join_path(at, "type"), f"UP loss {entry['type']!r} is not mapped in "
                                  "compose_loc_loss", "supported: iou_loss, l1_loss")
            terms.append((entry["type"], Options(entry.get("kwargs"), join_path(at, "kwargs"),
                                                 f"loss {entry['type']!r}")))
    giou, l1 = 0.0, 0.0
    for kind, kw in terms:
        if kind == "iou_loss":
            kw.take("loss_type", "iou", types=str, only="giou", why="the ATSS RetinaNet's box loss is 1 - GIoU")
            giou += loss_weight(kw)
        else:
            kw.take("scale_type", "linear", types=str, only="linear")
            kw.take("code_weights", None, only=None)
            l1 += loss_weight(kw)
        kw.done()
    if not giou:
        raise ConfigError(cfg.at("loc_loss"), "needs an iou_loss (giou) term", "add {type: iou_loss, kwargs: "
                          "{loss_type: giou}}")
    return giou, l1


def _anchors(cfg):
    _, kw = typed_part(cfg, "anchor_generator", ("hand_craft",), "anchor generator", family=FAMILY)
    ratios = kw.take("anchor_ratios", types=list)
    scales = kw.take("anchor_scales", types=list)
    kw.take("anchor_strides", None, only=None, why="the strides are the feature pyramid's")
    kw.done()
    return [float(r) for r in ratios], [float(s) for s in scales]


def _predictor(cfg):
    kind, pred = typed_part(cfg, "roi_predictor", ("base", "base_multicls"), "predictor", family=FAMILY)
    score = pred.take("pre_nms_score_thresh", types=float, check=lambda v: None if 0 <= v <= 1 else "must be in [0, 1]")
    pre = pred.take("pre_nms_top_n", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    post = pred.take("post_nms_top_n", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    pred.take("roi_min_size", 0, only=0, why="boxes of any size are kept")
    pred.take("clip_box", True, only=True)
    pred.take("nms", None, only=None, why="NMS runs in the merger, over all levels")
    if kind == "base":
        pred.take("share_location", True, only=True)
    _, merger = typed_part(pred, "merger", ("retina", "retina_multicls"), "merger", family=FAMILY)
    top = merger.take("top_n", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    nms = merger.take("nms", types=dict)
    if set(nms) - {"type", "nms_iou_thresh"} or nms.get("type", "naive") != "naive" \
            or not isinstance(nms.get("nms_iou_thresh"), (int, float)):
        raise ConfigError(merger.at("nms"), f"{nms} is not mapped", "expected {type: naive, nms_iou_thresh: x}")
    merger.done()
    pred.done()
    return dict(kind=kind, score_thresh=score, pre_nms_top_n=pre, post_nms_top_n=post,
                nms_thresh=float(nms["nms_iou_thresh"]), detections_per_img=top)


def read_post(kind, opts, num_classes, iou_head, type_path):
    iou_post = kind == "retina_post_iou"
    if iou_post != iou_head:
        raise ConfigError(type_path, f"{kind} with a head {'with' if iou_head else 'without'} an IoU branch is "
                          "not mapped", "RetinaHeadWithBN + retina_post, or RetinaHeadWithIOU / "
                          "RetinaHeadWithBNIOU + retina_post_iou")
    _classes(opts, want=num_classes)
    opts.ignore("prefix", "a log label")
    class_first = opts.take("class_first", iou_post, types=bool)
    if iou_post:
        opts.ignore("export_iou", "a deployment output option")
    cfg = opts.sub("cfg")
    for key in ("train", "test"):
        cfg.take(key, None, only=None, why="one setting serves training and evaluation")
    cls_kind, qfl = typed_part(cfg, "cls_loss", ("quality_focal_loss",) + EFL_TYPES, "classification loss",
                               family=FAMILY)
    beta, efl = 2.0, None
    if cls_kind in EFL_TYPES:
        efl = _efl(cls_kind, qfl, num_classes)
    else:
        beta = qfl.take("gamma", types=float, check=lambda v: None if v >= 0 else "must be >= 0")
        qfl.take("init_prior", 0.01, types=float)  # UP's loss does not read it: the head's init_prior sets the bias
        qfl.take("use_sigmoid", True, types=bool, only=True)
    qfl.take("ignore_index", -1, types=int, only=-1)
    dynamic = qfl.take("dynamic_normalizer", False, types=bool, check=lambda v: None if not (v and efl) else
                       "not mapped for the equalized losses (their normaliser is the positive count)")
    cls_weight = loss_weight(qfl)
    qfl.done()
    giou, l1 = _loc_terms(cfg)
    iou_weight = 1.0
    if iou_post:
        _, bce = typed_part(cfg, "iou_branch_loss", ("sigmoid_cross_entropy",), "IoU-branch loss", family=FAMILY)
        bce.take("ignore_index", -1, types=int, only=-1)
        bce.take("init_prior", 0.5, types=float)  # UP's loss does not read it
        iou_weight = loss_weight(bce)
        bce.done()
    ratios, scales = _anchors(cfg)
    sup_kind, sup = typed_part(cfg, "roi_supervisor", ("atss", "retina_ota"), "supervisor", family=FAMILY)
    top_k, ota = 9, None
    if sup_kind == "atss":
        top_k = sup.take("top_n", 9, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
        sup.take("use_centerness", False, types=bool, only=False, why="centerness targets are not mapped")
        sup.take("use_iou", iou_post, types=bool, only=iou_post,
                 why="IoU targets go with retina_post_iou (UP's other combinations cannot run)")
    else:
        ota = _ota(sup, num_classes, iou_post, cfg.at("roi_supervisor.type"))
    sup.take("gt_encode", True, types=bool, only=True)
    sup.ignore("return_gts", "an output for debugging")
    sup.done()
    predictor = _predictor(cfg)
    cfg.done()
    opts.done()
    return dict(beta=beta, cls_weight=cls_weight, giou_weight=giou, l1_weight=l1, iou_weight=iou_weight,
                ratios=ratios, scales=scales, top_k=top_k, ota=ota, predictor=predictor, class_first=class_first,
                efl=efl, dynamic_norm=dynamic)


def _efl(kind, kw, num_classes):
    """kwargs of :class:`EqualizedFocalLoss` from UP's ``equalized_focal_loss`` /
    ``equalized_quality_focal_loss`` (``fpn_levels`` is checked against the net's levels later)."""
    _classes(kw, want=num_classes)
    kw.ignore("name", "a log label")
    kw.take("reduction", "mean", types=str, only="mean")
    out = dict(quality=kind == "equalized_quality_focal_loss",
               gamma=kw.take("focal_gamma", 2.0, types=float, check=lambda v: None if v > 0 else "must be > 0"),
               scale_factor=kw.take("scale_factor", 8.0, types=float, check=lambda v: None if v >= 0 else
                                    "must be >= 0"),
               levels=kw.take("fpn_levels", 5, types=int, check=lambda v: None if v >= 1 else "must be >= 1"),
               levels_path=kw.at("fpn_levels"), alpha=-1.0)
    if kind == "equalized_focal_loss":
        out["alpha"] = kw.take("focal_alpha", 0.25, types=float)
    return out


def efl_module(post, num_classes, levels):
    """The EqualizedFocalLoss of ``post`` (None for QFL); ``fpn_levels`` must be the net's levels."""
    from ..det.atss import EqualizedFocalLoss

    efl = post["efl"]
    if efl is None:
        return None
    if efl["levels"] != levels:
        raise ConfigError(efl["levels_path"], f"{efl['levels']} but the net has {levels} levels",
                          "the gradients of every level's class map are collected")
    kwargs = {k: v for k, v in efl.items() if k != "levels_path"}
    return EqualizedFocalLoss(num_classes - 1, class_first=post["class_first"], **kwargs)


def _ota(sup, num_classes, iou_post, type_path):
    """(center_radius, candidate_k) of UP's ``retina_ota`` supervisor with its SimOTA matcher."""
    if iou_post:
        raise ConfigError(type_path, "retina_ota with retina_post_iou is not mapped (UP's retina_ota gives no IoU "
                          "targets)", "use atss with use_iou: true, or retina_post")
    _classes(sup, want=num_classes)
    sup.take("use_centerness_score", False, types=bool, only=False, why="centerness scores are not mapped")
    sup.take("norm_on_bbox", False, types=bool, only=False)
    _, matcher = typed_part(sup, "matcher", ("retina_ota",), "matcher", family=FAMILY)
    _classes(matcher, want=num_classes)
    matcher.take("use_SimOTA", True, types=bool, only=True, why="Sinkhorn OTA is not mapped: SimOTA only")
    matcher.take("center_sample", True, types=bool, only=True, why="SimOTA's candidates are centre-sampled")
    matcher.ignore("pos_radius", "UP's retina_ota matcher does not read it")
    candidate_k = matcher.take("candidate_k", 10, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    radius = matcher.take("radius", 2.5, types=float, check=lambda v: None if v > 0 else "must be > 0")
    matcher.done()
    return radius, candidate_k


# -- the model -------------------------------------------------------------------------------
def build_retina_plus_net(net_cfg, path):
    from ..det.atss import (RetinaPlusCriterion, RetinaPlusModel, RetinaPlusPredictor, RetinaSimOTAAssigner,
                                   box_coder)
    from .det_parts import up_cell_anchors

    opts = entry_options(net_cfg, path)
    kind = net_cfg[0]["type"]
    trunk, sync, fpn, levels, head, num_classes, head_sync = read_trunk_fpn_head(net_cfg, opts)
    post = read_post(net_cfg[3]["type"], opts[3], num_classes, head.iou_branch, join_path(join_path(path, 3), "type"))
    anchors = len(post["ratios"]) * len(post["scales"])
    if anchors != head.num_anchors:
        raise ConfigError(opts[2].at("num_anchors"), f"{head.num_anchors} but anchor_ratios x anchor_scales give "
                          f"{anchors}")
    coder = box_coder()
    assigner = None if post["ota"] is None else RetinaSimOTAAssigner(fpn.out_strides, *post["ota"])
    criterion = RetinaPlusCriterion(coder, post["top_k"], post["beta"], post["cls_weight"], post["giou_weight"],
                                    post["l1_weight"], head.iou_branch, post["iou_weight"], assigner,
                                    cls_loss=efl_module(post, num_classes, levels), dynamic_norm=post["dynamic_norm"])
    cells = [up_cell_anchors(s, post["ratios"], post["scales"]) for s in fpn.out_strides]
    model = RetinaPlusModel(trunk, fpn, head, criterion, RetinaPlusPredictor(coder, **post["predictor"]),
                            fpn.out_strides, cells, class_first=post["class_first"])
    return with_up_records(model, net_cfg, path, kind, trunk, fpn, levels, sync if sync is not None else head_sync)


def read_trunk_fpn_head(net_cfg, opts):
    """UP's ResNet trunk, FPN and RetinaNet-style head (entries 0-2) of the ATSS and OneNet
    files: (trunk, its sync-BN group, fpn, levels, head, num_classes, the head's sync group)."""
    from .backbones import build_resnet

    trunk, sync = build_resnet(net_cfg[0]["type"], opts[0])
    if len(trunk.out_layers) < 2 or trunk.out_layers != list(range(trunk.out_layers[0], 5)):
        raise ConfigError(opts[0].at("out_layers"), f"{trunk.out_layers}: an FPN needs consecutive stages up to 4")
    fpn = read_fpn(opts[1], trunk, norm_ok=True)
    levels = len(fpn.out_strides)
    head, num_classes, head_sync = read_head(net_cfg[2]["type"], opts[2], fpn.out_channels, levels)
    return trunk, sync, fpn, levels, head, num_classes, head_sync


def with_up_records(model, net_cfg, path, kind, trunk, fpn, levels, sync):
    """``model`` (a RetinaNet-style net on a ResNet trunk and UP's FPN) with what the trainer
    reads of a UP net: classes counted with background, where num_classes is written, the
    sync-BN group size, UP's entry names and the translation of UP-named weights."""
    model.num_classes_counts_background = True
    model.num_classes_path = join_path(join_path(path, 2), "kwargs.num_classes")
    model.sync_bn_group_size = sync
    model.up_part_names = [e["name"] for e in net_cfg]
    n_in = len(trunk.out_layers)
    model.translate_up_weights = partial(translate_up_weights, names=model.up_part_names[:3],
                                         rules={"backbone": backbone_rules(kind),
                                                "neck": fpn_rules(fpn.up_start_level, n_in, levels - n_in)})
    return model


def translate_up_weights(state, names, rules):
    """``state`` with UP's entry names (``names`` of backbone, neck, head) and UP's backbone / FPN
    parameter names rewritten to the model's; the head's names are UP's already."""
    ours = ("backbone", "neck", "roi_head")
    prefixes = {f"{up}.": f"{own}." for up, own in zip(names, ours) if up != own}
    state = {next((prefixes[p] + k[len(p):] for p in prefixes if k.startswith(p)), k): v for k, v in state.items()}
    return translate(state, rules)
