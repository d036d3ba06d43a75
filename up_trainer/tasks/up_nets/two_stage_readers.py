"""Read the kwargs of UP's two-stage parts (NaiveRPN + rpn_post / retina_post, BboxRes5_Pre +
BboxRes5, BboxRFCN_Pre + BboxRFCN, bbox_post, CascadeFC) into the native kwargs of
:mod:`up_trainer.tasks.det.rcnn.stages`. Each option is honoured or refused in one line with its path."""
from ...errors import ConfigError
from .det_readers import _bbox_normalize, _matcher, _nms_thresh, anchor_lists
from .layers import read_initializer
from .options import loss_weight, typed_part

RPN_CLS_LOSSES = ("sigmoid_cross_entropy", "softmax_cross_entropy")
LOC_LOSSES = ("smooth_l1_loss", "l1_loss")


def _positive(v):
    return None if v > 0 else "must be > 0"


def read_cls_loss(cfg, allowed, what):
    """A cross-entropy loss entry: its weight."""
    _, kw = typed_part(cfg, "cls_loss", allowed, what)
    weight = loss_weight(kw)
    kw.take("class_dim", -1, only=-1, why="the class dimension is the last")
    kw.take("ignore_index", -1, only=-1)
    kw.take("init_prior", 0.5, types=float)  # a sigmoid bias prior; the heads here start at zero bias
    kw.done()
    return weight


def read_loc_loss(cfg, what):
    """(beta, weight) of a ``smooth_l1_loss`` (beta = 1 / sigma^2) or ``l1_loss`` (beta 0) entry."""
    kind, kw = typed_part(cfg, "loc_loss", LOC_LOSSES, what)
    beta = 0.0
    if kind == "smooth_l1_loss":
        beta = 1.0 / kw.take("sigma", 1.0, types=float, check=_positive) ** 2
    weight = loss_weight(kw)
    kw.take("scale_type", "linear", only="linear")
    kw.take("code_weights", None, only=None)
    kw.done()
    return beta, weight


def read_rpn(head, post, strides, in_channels):
    """The kwargs of :func:`up_trainer.tasks.det.rcnn.stages.region_proposals` from NaiveRPN +
    rpn_post (or retina_post used as the proposal stage)."""
    levels = len(strides)
    head.take("inplanes", in_channels, types=(list, int))
    feat = head.take("feat_planes", in_channels, types=int, check=_positive)
    head.take("num_classes", 2, only=2, why="proposals are object / background")
    num_anchors = head.take("num_anchors", types=int, check=_positive)
    head.take("class_activation", "sigmoid", types=str, check=lambda v: None if v in ("sigmoid", "softmax") else
              "expected sigmoid or softmax")  # both: one objectness logit (see UPRPNHead)
    head.take("num_level", levels, only=levels, why="one per feature level")
    init = read_initializer(head, {"method": "normal", "std": 0.01})
    head.take("normalize", None, only=None)
    head.take("Normalize", None, only=None)
    head.done()
    if init[0] != "normal":
        raise ConfigError(head.at("initializer.method"), f"{init[0]!r} is not mapped for NaiveRPN", "use normal")

    post.take("num_classes", 2, only=2)
    post.ignore("prefix", "a log label")
    cfg = post.sub("cfg")
    cls_weight = read_cls_loss(cfg, RPN_CLS_LOSSES, "RPN classification loss")
    beta, loc_weight = read_loc_loss(cfg, "RPN localisation loss")
    ratios, scales = anchor_lists(cfg)
    if len(ratios) * len(scales) != num_anchors:
        raise ConfigError(head.at("num_anchors"), f"{num_anchors} but the anchor generator gives "
                          f"{len(ratios) * len(scales)}")
    _, sup = typed_part(cfg, "roi_supervisor", ("rpn",), "RPN supervisor")
    border = sup.take("allowed_border", -1, types=int)
    matcher = _matcher(sup)
    _, sampler = typed_part(sup, "sampler", ("naive",), "sampler")
    batch, frac = sampler.take("batch_size", types=int, check=_positive), sampler.take("positive_percent", types=float)
    sampler.done(), sup.done()
    phases = {}
    for phase in ("train", "test"):
        ph = cfg.sub(phase)
        _, pred = typed_part(ph, "roi_predictor", ("base",), "RPN predictor")
        pre_n = pred.take("pre_nms_top_n", types=int, check=_positive)
        post_n = pred.take("post_nms_top_n", types=int, check=_positive)
        top = post_n * levels  # per level, as UP without a merger (the levels' best overall here)
        _, merger = typed_part(pred, "merger", ("rpn",), "RPN merger") if "merger" in pred.kwargs else (None, None)
        if merger is not None:
            top = merger.take("top_n", types=int, check=_positive)
            merger.done()
            if post_n < top and levels > 1:
                raise ConfigError(pred.at("post_nms_top_n"), f"{post_n} below the merger's top_n {top} is not "
                                  "mapped", "torchvision keeps the best top_n over all levels")
            top = min(top, post_n * levels)  # UP: post_nms_top_n per level, then the merger's top_n
        phases[phase] = dict(pre=pre_n, top=top, score=pred.take("pre_nms_score_thresh", types=float),
                             nms=_nms_thresh(pred))
        pred.take("roi_min_size", 0, only=0, why="torchvision drops only empty proposals")
        pred.take("clip_box", True, only=True)
        pred.done(), ph.done()
    if phases["train"]["nms"] != phases["test"]["nms"] or phases["train"]["score"] != phases["test"]["score"]:
        raise ConfigError(cfg.at("test"), "NMS and score thresholds that differ between train and test are "
                          "not mapped (torchvision's RPN has one of each)")
    cfg.done(), post.done()
    return dict(in_channels=in_channels, strides=list(strides), anchor_ratios=ratios, anchor_scales=scales,
                rpn_channels=feat, rpn_init_std=init[1], **matcher_kwargs(matcher, "rpn_"), rpn_batch_size=batch,
                rpn_positive_fraction=frac, rpn_pre_nms_top_n=[phases["train"]["pre"], phases["test"]["pre"]],
                rpn_post_nms_top_n=[phases["train"]["top"], phases["test"]["top"]],
                rpn_nms_thresh=phases["train"]["nms"], rpn_score_thresh=phases["train"]["score"],
                rpn_smooth_l1_beta=beta, rpn_allowed_border=border, rpn_cls_weight=cls_weight,
                rpn_loc_weight=loc_weight, rpn_per_positive=post.what == "retina_post")


def matcher_kwargs(matcher, prefix=""):
    """A read UPMatcher as the native kwargs (``fg_iou``, ``bg_iou``, ``low_quality``, ...)."""
    return {f"{prefix}fg_iou": matcher.pos, f"{prefix}bg_iou": matcher.neg, f"{prefix}low_quality": matcher.low_quality,
            f"{prefix}low_quality_thresh": matcher.low_thresh}


def read_supervisor(pre_cfg):
    """(matcher, batch size, positive fraction, stds) of a ``faster`` bbox_supervisor."""
    _, sup = typed_part(pre_cfg, "bbox_supervisor", ("faster",), "box supervisor")
    _, stds = _bbox_normalize(sup)
    matcher = _matcher(sup)
    _, sampler = typed_part(sup, "sampler", ("naive",), "sampler")
    batch, frac = sampler.take("batch_size", types=int, check=_positive), sampler.take("positive_percent", types=float)
    sampler.done(), sup.done()
    return matcher, batch, frac, stds


def read_roipooling(opts, methods):
    """(method, pool_size, sampling_ratio) of a ``roipooling`` mapping."""
    rp = opts.sub("roipooling")
    method = rp.take("method", methods[0], types=str, check=lambda v: None if v in methods else
                     f"expected {' or '.join(methods)} here")
    size = rp.take("pool_size", 7, types=int, check=_positive)
    sampling = rp.take("sampling_ratio", 0, types=int, check=lambda v: None if v >= 0 else "must be >= 0")
    rp.done()
    return method, size, sampling


def read_bbox_post(post, stds, agnostic):
    """(beta, cls weight, loc weight, score thresh, nms thresh, top_n) of bbox_post."""
    cfg = post.sub("cfg")
    post.ignore("prefix", "a log label")
    cls_weight = read_cls_loss(cfg, ("softmax_cross_entropy",), "box classification loss")
    beta, loc_weight = read_loc_loss(cfg, "box localisation loss")
    cfg.take("share_location", agnostic, only=agnostic, why="the head's share_location")
    if _bbox_normalize(cfg)[1] != stds:
        raise ConfigError(cfg.at("bbox_normalize"), "differs from the supervisor's")
    _, pred = typed_part(cfg, "bbox_predictor", ("faster",), "box predictor")
    if _bbox_normalize(pred)[1] != stds:
        raise ConfigError(pred.at("bbox_normalize"), "differs from the supervisor's")
    pred.take("share_location", agnostic, only=agnostic, why="the head's share_location")
    nms = _nms_thresh(pred)
    score = pred.take("bbox_score_thresh", 0.0, types=float)
    top = pred.take("top_n", 100, types=int, check=_positive)
    pred.done(), cfg.done(), post.done()
    if cls_weight != 1.0 or loc_weight != 1.0:
        raise ConfigError(post.at("cfg"), "loss_weight other than 1 is not mapped for bbox_post")
    return beta, score, nms, top


def read_stage_matchers(sup, num_stage):
    """The stages' matching kwargs of a cascade supervisor's ``stage_matcher`` (threshold lists)."""
    _, m = typed_part(sup, "stage_matcher", ("max_iou",), "matcher")

    def per_stage(key):
        value = m.take(key, types=(list, float))
        value = value if isinstance(value, list) else [value] * num_stage
        if len(value) != num_stage or not all(isinstance(v, (int, float)) for v in value):
            raise ConfigError(m.at(key), f"expected {num_stage} thresholds (one per stage), got {value}")
        return [float(v) for v in value]

    pos, neg = per_stage("positive_iou_thresh"), per_stage("negative_iou_thresh")
    m.take("ignore_iou_thresh", 0.5, types=float)  # only acts on ignore regions, which our data has none of
    low = m.take("allow_low_quality_match", False, types=bool)
    low_thresh = m.take("low_quality_thresh", 0.0, types=float)
    m.done()
    return dict(fg_iou=pos, bg_iou=neg, low_quality=low, low_quality_thresh=low_thresh)


def read_stage_stds(opts, key, num_stage):
    norm = opts.take(key, types=dict)
    means, stds = norm.get("means"), norm.get("stds")
    ok = set(norm) <= {"means", "stds"} and isinstance(stds, list) and len(stds) == num_stage and \
        all(isinstance(s, list) and len(s) == 4 for s in stds) and \
        (means is None or (len(means) == num_stage and not any(v for m in means for v in m)))
    if not ok:
        raise ConfigError(opts.at(key), f"{norm} is not mapped",
                          f"zero means and {num_stage} lists of four stds (box coder weights are 1/std)")
    return [[float(v) for v in s] for s in stds]
