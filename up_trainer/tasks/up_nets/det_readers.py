"""Read the kwargs of UP's detection heads and post-processes into torchvision detectors.

Each UP option is honoured (mapped onto a torchvision argument or one of the pieces in
:mod:`.det_parts`) or refused in one line; see docs/up/ (Coming from UP) for where
torchvision's computation differs.
"""
import math

from torch import nn

from ...errors import ConfigError
from .det_parts import FocalHead, ForegroundRetinaNet, L1BoxHead, UPAnchorGenerator, UPMatcher, prepared_transform
from .layers import read_initializer
from .options import loss_weight, read_num_classes, typed_part


def _fixed_loss(cfg, key, allowed, what):
    """A Faster R-CNN loss: torchvision's own, so only UP's neutral settings are accepted; its
    ``loss_weight`` is returned (it multiplies torchvision's loss of that name)."""
    _, kw = typed_part(cfg, key, allowed, what)
    weight = loss_weight(kw)
    kw.take("class_dim", -1, only=-1)
    kw.take("ignore_index", -1, only=-1)
    kw.take("init_prior", 0.5, types=float)  # UP's bias init for a sigmoid classifier; the RPN's is zero
    kw.take("scale_type", "linear", only="linear")
    kw.done()
    return weight


def anchor_lists(cfg):
    """(ratios, scales) of a ``hand_craft`` anchor generator."""
    _, kw = typed_part(cfg, "anchor_generator", ("hand_craft",), "anchor generator")
    ratios = kw.take("anchor_ratios", types=list)
    scales = kw.take("anchor_scales", types=list)
    kw.take("anchor_strides", None, only=None, why="the strides are the feature pyramid's")
    kw.done()
    return [float(r) for r in ratios], [float(s) for s in scales]


def _anchors(cfg, strides):
    return UPAnchorGenerator(strides, *anchor_lists(cfg))


def _matcher(kw):
    """(UPMatcher, sampler kwargs) from a UP ``roi_supervisor``/``bbox_supervisor``'s kwargs."""
    _, m = typed_part(kw, "matcher", ("max_iou",), "matcher")
    pos = m.take("positive_iou_thresh", types=float)
    neg = m.take("negative_iou_thresh", types=float)
    m.take("ignore_iou_thresh", 0.5, types=float)  # only acts on ignore regions, which our data has none of
    low = m.take("allow_low_quality_match", types=bool)
    low_thresh = m.take("low_quality_thresh", 0.0, types=float)
    m.done()
    return UPMatcher(pos, neg, low, low_thresh)


def _nms_thresh(opts):
    nms = opts.take("nms", types=dict)
    if set(nms) - {"type", "nms_iou_thresh"} or nms.get("type", "naive") != "naive":
        raise ConfigError(opts.at("nms"), f"{nms} is not mapped", "expected {type: naive, nms_iou_thresh: x}")
    return float(nms["nms_iou_thresh"])


def read_retina(head, post, fpn, backbone):
    """(torchvision RetinaNet, foreground classes) from RetinaSubNet + retina_post kwargs."""
    head.take("inplanes", [fpn.out_channels] * len(fpn.out_strides), types=(list, int))
    n = read_num_classes(head)
    head.take("feat_planes", fpn.out_channels, only=fpn.out_channels,
              why="torchvision's RetinaNet head keeps the pyramid's channel count")
    head.take("normalize", None, only=None, why="the torchvision head has plain convolutions")
    init = read_initializer(head, {"method": "normal", "std": 0.01})
    head.take("num_conv", 4, only=4, why="torchvision's RetinaNet head has 4 convolutions per branch")
    head.take("class_activation", "sigmoid", only="sigmoid")
    prior = head.take("init_prior", 0.01, types=float)
    num_anchors = head.take("num_anchors", 9, types=int)
    head.take("num_level", len(fpn.out_strides), only=len(fpn.out_strides), why="one per pyramid level")
    head.take("share_subnet", False, only=False)
    head.take("share_location", True, only=True)
    head.done()

    if post.take("num_classes", n, types=int) != n:
        raise ConfigError(post.at("num_classes"), f"differs from the head's {n}")
    post.ignore("prefix", "a log label")
    cfg = post.sub("cfg")
    _, focal = typed_part(cfg, "cls_loss", ("sigmoid_focal_loss",), "classification loss")
    if focal.take("num_classes", n, types=int) != n:
        raise ConfigError(focal.at("num_classes"), f"differs from the head's {n}")
    alpha, gamma = focal.take("alpha", 0.25, types=float), focal.take("gamma", 2.0, types=float)
    focal.take("init_prior", prior, types=float)  # UP reads the head's init_prior for the bias
    focal.take("ignore_index", -1, only=-1)
    focal.take("dynamic_normalizer", False, only=False)
    cls_weight = loss_weight(focal)
    focal.done()
    _, l1 = typed_part(cfg, "loc_loss", ("l1_loss",), "localisation loss")
    loc_weight = loss_weight(l1)
    l1.take("scale_type", "linear", only="linear")
    l1.take("code_weights", None, only=None)
    l1.done()
    anchors = _anchors(cfg, fpn.out_strides)
    if anchors.num_anchors_per_location()[0] != num_anchors:
        raise ConfigError(head.at("num_anchors"), f"{num_anchors} but anchor_ratios x anchor_scales give "
                          f"{anchors.num_anchors_per_location()[0]}")
    _, sup = typed_part(cfg, "roi_supervisor", ("retina",), "supervisor")
    sup.take("allowed_border", -1, only=-1, why="every anchor is kept, as torchvision does")
    matcher = _matcher(sup)
    typed_part(sup, "sampler", ("keep_all",), "sampler")[1].done()
    sup.done()
    _, pred = typed_part(cfg, "roi_predictor", ("base",), "predictor")
    score = pred.take("pre_nms_score_thresh", types=float)
    top_k = pred.take("pre_nms_top_n", types=int)
    pred.take("post_nms_top_n", types=int)  # a per-class, per-level cap UP applies before merging
    pred.take("roi_min_size", 0, only=0, why="torchvision keeps boxes of any size")
    pred.take("clip_box", True, only=True)
    _, merger = typed_part(pred, "merger", ("retina",), "merger")
    per_img = merger.take("top_n", types=int)
    nms = _nms_thresh(merger)
    merger.done()
    pred.done()
    cfg.done()
    post.done()

    from torchvision.models.detection.retinanet import RetinaNetHead

    channels = fpn.out_channels
    det_head = RetinaNetHead(channels, num_anchors, n - 1)
    det_head.classification_head = FocalHead(channels, num_anchors, n - 1, prior, alpha, gamma, cls_weight)
    det_head.regression_head = L1BoxHead(channels, num_anchors, loc_weight)
    _init_normal(det_head, init, prior)
    det = ForegroundRetinaNet(backbone, n - 1, anchor_generator=anchors, head=det_head, proposal_matcher=matcher,
                              score_thresh=score, nms_thresh=nms, detections_per_img=per_img, topk_candidates=top_k)
    det.transform = prepared_transform()
    return det, n - 1


def _init_normal(head, init, prior):
    """UP's head init: every conv N(0, std) with zero bias, then the class bias at the prior."""
    method, std = init
    if method != "normal":
        raise ConfigError(None, f"UP's RetinaSubNet initializer {method!r} is not mapped", "use normal")
    for m in head.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.normal_(m.weight, std=std)
            nn.init.zeros_(m.bias)
    nn.init.constant_(head.classification_head.cls_logits.bias, -math.log((1 - prior) / prior))


def read_faster(opts, fpn, backbone):
    """(torchvision Faster R-CNN, foreground classes) from NaiveRPN, rpn_post, BboxFC_Pre,
    BboxFC and bbox_post kwargs."""
    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.rpn import RPNHead
    from torchvision.ops import MultiScaleRoIAlign

    rpn, rpn_post, pre, box, box_post = opts
    levels = len(fpn.out_strides)
    rpn.take("inplanes", [fpn.out_channels] * levels, types=(list, int))
    rpn.take("feat_planes", fpn.out_channels, only=fpn.out_channels, why="torchvision's RPN head keeps the channels")
    rpn.take("num_classes", 2, only=2)
    num_anchors = rpn.take("num_anchors", types=int)
    rpn.take("class_activation", "sigmoid", only="sigmoid", why="torchvision's RPN scores one logit per anchor")
    rpn.take("num_level", levels, only=levels)
    rpn_init = read_initializer(rpn, {"method": "normal", "std": 0.01})
    rpn.take("Normalize", None, only=None)
    rpn.done()

    rpn_post.take("num_classes", 2, only=2)
    cfg = rpn_post.sub("cfg")
    weights = {"loss_objectness": _fixed_loss(cfg, "cls_loss", ("sigmoid_cross_entropy",), "RPN classification loss"),
               "loss_rpn_box_reg": _fixed_loss(cfg, "loc_loss", ("l1_loss",), "RPN localisation loss")}
    anchors = _anchors(cfg, fpn.out_strides)
    if anchors.num_anchors_per_location()[0] != num_anchors:
        raise ConfigError(rpn.at("num_anchors"), f"{num_anchors} but the anchor generator gives "
                          f"{anchors.num_anchors_per_location()[0]}")
    _, sup = typed_part(cfg, "roi_supervisor", ("rpn",), "RPN supervisor")
    sup.take("allowed_border", -1, only=-1, why="every anchor is kept, as torchvision does")
    rpn_matcher = _matcher(sup)
    _, sampler = typed_part(sup, "sampler", ("naive",), "sampler")
    rpn_batch, rpn_pos = sampler.take("batch_size", types=int), sampler.take("positive_percent", types=float)
    sampler.done(), sup.done()
    phases = {}
    for phase in ("train", "test"):
        ph = cfg.sub(phase)
        _, pred = typed_part(ph, "roi_predictor", ("base",), "RPN predictor")
        pre_n, post_n = pred.take("pre_nms_top_n", types=int), pred.take("post_nms_top_n", types=int)
        _, merger = typed_part(pred, "merger", ("rpn",), "RPN merger")
        top = merger.take("top_n", types=int)
        merger.done()
        if post_n < top:
            raise ConfigError(pred.at("post_nms_top_n"), f"{post_n} below the merger's top_n {top} is not mapped",
                              "torchvision keeps the best top_n over all levels")
        phases[phase] = dict(pre=pre_n, top=top, score=pred.take("pre_nms_score_thresh", types=float),
                             nms=_nms_thresh(pred))
        pred.take("roi_min_size", 0, only=0, why="torchvision drops only empty proposals")
        pred.take("clip_box", True, only=True)
        pred.done(), ph.done()
    if phases["train"]["nms"] != phases["test"]["nms"] or phases["train"]["score"] != phases["test"]["score"]:
        raise ConfigError(cfg.at("test"), "NMS and score thresholds that differ between train and test are "
                          "not mapped (torchvision's RPN has one of each)")
    cfg.done(), rpn_post.done()

    pre_cfg = pre.sub("cfg")
    _, bsup = typed_part(pre_cfg, "bbox_supervisor", ("faster",), "box supervisor")
    means, stds = _bbox_normalize(bsup)
    box_matcher = _matcher(bsup)
    _, sampler = typed_part(bsup, "sampler", ("naive",), "sampler")
    box_batch, box_pos = sampler.take("batch_size", types=int), sampler.take("positive_percent", types=float)
    sampler.done(), bsup.done()
    fpn_cfg = pre_cfg.sub("fpn")
    roi_levels = fpn_cfg.take("fpn_levels", types=list)
    if roi_levels != list(range(len(roi_levels))) or len(roi_levels) > len(fpn.out_strides):
        raise ConfigError(fpn_cfg.at("fpn_levels"), f"{roi_levels}: consecutive levels from 0 are mapped")
    fpn_cfg.take("base_scale", 56, only=56, why="torchvision maps boxes of 224 pixels to the level of stride 16")
    fpn_cfg.done()
    pool_size, sampling = _roipooling(pre_cfg)
    pre.take("with_drp", False, only=False)
    pre_cfg.done(), pre.done()

    box.take("inplanes", fpn.out_channels, types=(list, int))
    feat = box.take("feat_planes", types=int)
    n = read_num_classes(box)
    box_init = read_initializer(box)
    bcfg = box.sub("cfg")
    bcfg.take("class_activation", "softmax", only="softmax")
    if _roipooling(bcfg) != (pool_size, sampling):
        raise ConfigError(bcfg.at("roipooling"), "differs from BboxFC_Pre's")
    bcfg.take("share_location", False, only=False, why="torchvision regresses a box per class")
    bcfg.done(), box.done()

    post_cfg = box_post.sub("cfg")
    weights["loss_classifier"] = _fixed_loss(post_cfg, "cls_loss", ("softmax_cross_entropy",),
                                             "box classification loss")
    weights["loss_box_reg"] = _fixed_loss(post_cfg, "loc_loss", ("l1_loss",), "box localisation loss")
    post_cfg.take("share_location", False, only=False)
    if _bbox_normalize(post_cfg) != (means, stds):
        raise ConfigError(post_cfg.at("bbox_normalize"), "differs from BboxFC_Pre's")
    _, bpred = typed_part(post_cfg, "bbox_predictor", ("faster",), "box predictor")
    if _bbox_normalize(bpred) != (means, stds):
        raise ConfigError(bpred.at("bbox_normalize"), "differs from BboxFC_Pre's")
    bpred.take("share_location", False, only=False)
    box_nms = _nms_thresh(bpred)
    box_score = bpred.take("bbox_score_thresh", types=float)
    per_img = bpred.take("top_n", types=int)
    bpred.done(), post_cfg.done(), box_post.done()

    from .layers import initialize

    ch = fpn.out_channels
    rpn_head = RPNHead(ch, num_anchors)
    for m in rpn_head.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.normal_(m.weight, std=rpn_init[1] if rpn_init and rpn_init[0] == "normal" else 0.01)
            nn.init.zeros_(m.bias)
    box_head = TwoMLPHead(ch * pool_size * pool_size, feat)
    predictor = FastRCNNPredictor(feat, n)
    initialize(box_head, box_init)
    nn.init.normal_(predictor.cls_score.weight, std=0.01), nn.init.zeros_(predictor.cls_score.bias)
    nn.init.normal_(predictor.bbox_pred.weight, std=0.001), nn.init.zeros_(predictor.bbox_pred.bias)
    det = FasterRCNN(
        backbone, None, rpn_anchor_generator=anchors, rpn_head=rpn_head,
        rpn_pre_nms_top_n_train=phases["train"]["pre"], rpn_pre_nms_top_n_test=phases["test"]["pre"],
        rpn_post_nms_top_n_train=phases["train"]["top"], rpn_post_nms_top_n_test=phases["test"]["top"],
        rpn_nms_thresh=phases["train"]["nms"], rpn_score_thresh=phases["train"]["score"],
        rpn_batch_size_per_image=rpn_batch, rpn_positive_fraction=rpn_pos,
        box_roi_pool=MultiScaleRoIAlign([str(i) for i in roi_levels], pool_size, sampling),
        box_head=box_head, box_predictor=predictor, box_score_thresh=box_score, box_nms_thresh=box_nms,
        box_detections_per_img=per_img, box_batch_size_per_image=box_batch, box_positive_fraction=box_pos,
        bbox_reg_weights=tuple(1.0 / s for s in stds))
    det.rpn.proposal_matcher, det.roi_heads.proposal_matcher = rpn_matcher, box_matcher
    det.transform = prepared_transform()
    det.up_loss_weights = {k: w for k, w in weights.items() if w != 1.0}  # UP's loss_weight per torchvision loss
    return det, n - 1


def _bbox_normalize(opts):
    norm = opts.take("bbox_normalize", {"means": [0, 0, 0, 0], "stds": [1, 1, 1, 1]}, types=dict)
    means, stds = list(norm.get("means", [0] * 4)), [float(s) for s in norm.get("stds", [1] * 4)]
    if set(norm) - {"means", "stds"} or any(means) or len(stds) != 4:
        raise ConfigError(opts.at("bbox_normalize"), f"{norm} is not mapped",
                          "zero means and four stds (torchvision's box coder weights are 1/std)")
    return means, stds


def _roipooling(opts):
    rp = opts.sub("roipooling")
    rp.take("method", "roialignpool", only="roialignpool", why="torchvision's MultiScaleRoIAlign")
    size = rp.take("pool_size", 7, types=int)
    sampling = rp.take("sampling_ratio", 0, types=int)
    rp.done()
    return size, sampling
