"""The two stages of the family's nets from native kwargs: region proposals (anchors, the RPN
head, matching, sampling, NMS) and the box stages (matching, sampling, box coder, decode). The
native entries (:mod:`.build`) and UP's readers (:mod:`up_trainer.tasks.up_nets.rcnn_net`)
both build through these two functions."""
from ....errors import ConfigError
from ..box_ops import box_coder
from ..pyramid_levels import UPAnchorGenerator
from .box_stages import BoxStages
from .matching import UPMatcher
from .proposals import UPRegionProposals, UPRPNHead

BOX_STDS = [0.1, 0.1, 0.2, 0.2]


def _pair(key, value):
    """[train, test] from one integer (both) or a pair of integers, each >= 1."""
    pair = [value, value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair)):
        raise ConfigError(key, f"expected an integer >= 1 or [train, test] integers, got {value!r}")
    return list(pair)


def _fraction(key, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(key, f"must be in [0, 1], got {value!r}")


def _count(key, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(key, f"must be an integer >= 1, got {value!r}")


def _stds(key, value):
    if not (isinstance(value, (list, tuple)) and len(value) == 4 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ConfigError(key, f"expected four positive numbers (x, y, w, h), got {value!r}")
    return [float(v) for v in value]


def region_proposals(in_channels, strides, anchor_ratios=(0.5, 1.0, 2.0), anchor_scales=(8.0,), rpn_channels=None,
                     rpn_init_std=0.01, rpn_fg_iou=0.7, rpn_bg_iou=0.3, rpn_low_quality=True,
                     rpn_low_quality_thresh=0.0, rpn_batch_size=256, rpn_positive_fraction=0.5,
                     rpn_pre_nms_top_n=(2000, 1000), rpn_post_nms_top_n=(2000, 1000), rpn_nms_thresh=0.7,
                     rpn_score_thresh=0.0, rpn_smooth_l1_beta=1 / 9, rpn_allowed_border=-1, rpn_cls_weight=1.0,
                     rpn_loc_weight=1.0, rpn_per_positive=False):
    """UP's NaiveRPN with its proposal post-process. ``rpn_pre_nms_top_n``: candidates per level,
    ``rpn_post_nms_top_n``: proposals kept per image, each one number or [train, test];
    ``rpn_per_positive``: losses divided by the positive anchors (UP's ``retina_post`` as the
    proposal stage) instead of the sampled ones."""
    for key, values in (("anchor_ratios", anchor_ratios), ("anchor_scales", anchor_scales)):
        if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 for v in values):
            raise ConfigError(key, f"expected a non-empty list of positive numbers, got {values!r}")
    for key, value in (("rpn_fg_iou", rpn_fg_iou), ("rpn_bg_iou", rpn_bg_iou),
                       ("rpn_positive_fraction", rpn_positive_fraction), ("rpn_nms_thresh", rpn_nms_thresh)):
        _fraction(key, value)
    _count("rpn_batch_size", rpn_batch_size)
    pre, post = _pair("rpn_pre_nms_top_n", rpn_pre_nms_top_n), _pair("rpn_post_nms_top_n", rpn_post_nms_top_n)
    anchors = UPAnchorGenerator(strides, [float(r) for r in anchor_ratios], [float(s) for s in anchor_scales])
    num_anchors = anchors.num_anchors_per_location()[0]
    head = UPRPNHead(in_channels, rpn_channels or in_channels, num_anchors, rpn_init_std)
    rpn = UPRegionProposals(anchors, head, 0.7, 0.3, rpn_batch_size, rpn_positive_fraction,
                            dict(training=pre[0], testing=pre[1]), dict(training=post[0], testing=post[1]),
                            rpn_nms_thresh, rpn_score_thresh, beta=rpn_smooth_l1_beta,
                            allowed_border=rpn_allowed_border, cls_weight=rpn_cls_weight,
                            loc_weight=rpn_loc_weight, per_positive=rpn_per_positive)
    rpn.proposal_matcher = UPMatcher(rpn_fg_iou, rpn_bg_iou, rpn_low_quality, rpn_low_quality_thresh)
    return rpn


def box_stages(nets, fg_iou=(0.5,), bg_iou=(0.5,), low_quality=False, low_quality_thresh=0.0, stds=(BOX_STDS,),
               batch_size=512, positive_fraction=0.25, smooth_l1_beta=1.0, stage_weights=None, test_ensemble=False,
               score_thresh=0.0, nms_thresh=0.5, detections_per_img=100):
    """:class:`BoxStages` over ``nets`` (one box net per stage); ``fg_iou``, ``bg_iou`` and
    ``stds`` (the box coder's, 1 / its weights) one per stage."""
    stages = len(nets)
    for key, values in (("fg_iou", fg_iou), ("bg_iou", bg_iou), ("stds", stds)):
        if len(values) != stages:
            raise ConfigError(key, f"{len(values)} values for {stages} stages")
    for key, values in (("fg_iou", fg_iou), ("bg_iou", bg_iou)):
        for v in values:
            _fraction(key, v)
    _count("batch_size", batch_size)
    _fraction("positive_fraction", positive_fraction)
    _fraction("nms_thresh", nms_thresh)
    _count("detections_per_img", detections_per_img)
    coders = [box_coder([float(v) for v in _stds("stds", s)]) for s in stds]
    matchers = [UPMatcher(float(p), float(n), low_quality, low_quality_thresh) for p, n in zip(fg_iou, bg_iou)]
    weights = None if stage_weights is None else [float(w) for w in stage_weights]
    if weights is not None and len(weights) != stages:
        raise ConfigError("stage_weights", f"{len(weights)} weights for {stages} stages")
    return BoxStages(nets, matchers, coders, batch_size, positive_fraction, smooth_l1_beta, weights, test_ensemble,
                     score_thresh, nms_thresh, detections_per_img)
