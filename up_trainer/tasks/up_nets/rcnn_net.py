"""UP's two-stage net lists mapped onto :mod:`up_trainer.tasks.det.rcnn`:

* resnet (one stride-16 map) + ``NaiveRPN`` + ``rpn_post`` + ``BboxRes5_Pre`` + ``BboxRes5`` +
  ``bbox_post`` (Faster R-CNN C4), or + ``retina_post`` / ``rpn_post`` + ``BboxRFCN_Pre`` +
  ``BboxRFCN`` + ``bbox_post`` (R-FCN), or resnet + ``FPN`` + ``NaiveRPN`` + ``rpn_post`` +
  ``CascadeFC`` (Cascade R-CNN) -> :class:`~up_trainer.tasks.det.rcnn.TwoStageModel`.

Every kwarg is honoured or refused in one line with its path (docs/up/two_stage.rst).
The models carry UP's entry names as their children.
"""
from functools import partial

from ...errors import ConfigError
from .backbones import build_resnet
from .det_net import read_fpn, up_model_attrs
from .det_readers import _nms_thresh
from .keymap import backbone_rules, fpn_rules, module_path, translate
from .layers import initialize, read_initializer
from .options import entry_options, read_num_classes, typed_part
from .two_stage_readers import matcher_kwargs, read_bbox_post, read_cls_loss, read_loc_loss, read_roipooling, \
    read_rpn, read_stage_matchers, read_stage_stds, read_supervisor


# -- two-stage: C4 Faster R-CNN, R-FCN, Cascade R-CNN --------------------------------------------
C4_PARTS = ("NaiveRPN", "rpn_post", "BboxRes5_Pre", "BboxRes5", "bbox_post")
RFCN_PARTS = ("NaiveRPN", "retina_post", "BboxRFCN_Pre", "BboxRFCN", "bbox_post")
CASCADE_PARTS = ("FPN", "NaiveRPN", "rpn_post", "CascadeFC")
RES5_BACKBONES = ("resnet18", "resnet34", "resnet50", "resnet101")
BASE_SCALE = 56  # UP's level rule floor(log2(sqrt(wh) / 56)) is torchvision's (224 px -> level of stride 16)


def two_stage_shape(types):
    """'c4', 'rfcn' or 'cascade' for the parts after the backbone, else None."""
    if types == C4_PARTS:
        return "c4"
    if types in (RFCN_PARTS, ("NaiveRPN", "rpn_post") + RFCN_PARTS[2:]):
        return "rfcn"
    if types == CASCADE_PARTS:
        return "cascade"
    return None


def _single_map(trunk, opts, what):
    if len(trunk.out_layers) != 1:
        raise ConfigError(opts.at("out_layers"), f"{trunk.out_layers}: {what} reads one feature map",
                          "one stage, e.g. out_layers: [3]")
    return trunk.out_planes[0], trunk.out_strides[0]


def _res5_builder(opts, arch, in_planes):
    """Reads BboxRes5's stage-5 settings; returns the builder of that stage (ResNet stage 5 of
    ``arch`` taking ``in_planes`` channels, first block of a given stride), run when the net is
    assembled (after the proposal stage, as UP builds them)."""
    import torchvision

    from ..det.rcnn.build import res5_at_stride
    from .layers import norm_layer

    if arch not in RES5_BACKBONES:
        raise ConfigError(opts.at("backbone"), f"{arch!r} is not mapped for BboxRes5",
                          f"supported: {', '.join(RES5_BACKBONES)}")
    norm, _ = norm_layer(opts, default="freeze_bn")
    at = opts.at("inplanes")

    def build(stride):
        layer4 = res5_at_stride(torchvision.models.get_model(arch, weights=None, norm_layer=norm).layer4, stride)
        first = layer4[0]
        if first.downsample[0].in_channels != in_planes:
            raise ConfigError(at, f"stage 5 of {arch} takes {first.downsample[0].in_channels} "
                              f"channels, the backbone gives {in_planes}")
        return layer4, first.downsample[0].out_channels

    return build


def _box_kwargs(matcher, stds, batch, frac, post):
    """The kwargs of :func:`up_trainer.tasks.det.rcnn.stages.box_stages` for one stage."""
    beta, score, nms, top = post
    m = matcher_kwargs(matcher)
    return dict(fg_iou=[m["fg_iou"]], bg_iou=[m["bg_iou"]], low_quality=m["low_quality"],
                low_quality_thresh=m["low_quality_thresh"], stds=[stds], batch_size=batch, positive_fraction=frac,
                smooth_l1_beta=beta, score_thresh=score, nms_thresh=nms, detections_per_img=top)


def read_c4(opts, planes, stride):
    from ..det.rcnn import Res5Head

    pre, head, post = opts
    pre_cfg = pre.sub("cfg")
    matcher, batch, frac, stds = read_supervisor(pre_cfg)
    pooling = read_roipooling(pre_cfg, ("roialignpool",))
    pre_cfg.done()
    pre.take("with_drp", False, only=False)
    pre.done()
    head.take("inplanes", planes, types=(list, int))
    arch = head.take("backbone", types=str)
    n = read_num_classes(head)
    head.take("deformable", False, only=False, why="torchvision has no deformable blocks here")
    init = read_initializer(head)
    cfg = head.sub("cfg")
    cfg.take("class_activation", "softmax", only="softmax")
    if read_roipooling(cfg, ("roialignpool",)) != pooling:
        raise ConfigError(cfg.at("roipooling"), "differs from BboxRes5_Pre's")
    agnostic = cfg.take("share_location", False, types=bool)
    cfg.done()
    _, size, sampling = pooling
    if size % 7:
        raise ConfigError(pre_cfg.at("roipooling.pool_size"), f"{size}: UP's res5 head takes 7 or 14 (stride 1 or 2)")
    res5 = _res5_builder(head, arch, planes)
    head.done()

    def nets():
        layer4, out = res5(size // 7)
        initialize(layer4, init)
        return [Res5Head(layer4, out, n, size, stride, sampling, agnostic)]

    return nets, _box_kwargs(matcher, stds, batch, frac, read_bbox_post(post, stds, agnostic)), n


def read_rfcn(opts, planes, stride):
    from ..det.rcnn import RFCNHead

    pre, head, post = opts
    pre_cfg = pre.sub("cfg")
    matcher, batch, frac, stds = read_supervisor(pre_cfg)
    pooling = _ps_pooling(pre_cfg)
    pre_cfg.done()
    pre.take("with_drp", False, only=False)
    pre.done()
    head.take("inplanes", planes, types=(list, int))
    feat = head.take("feat_planes", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    n = read_num_classes(head)
    init = read_initializer(head)
    cfg = head.sub("cfg")
    cfg.take("class_activation", "softmax", only="softmax")
    if _ps_pooling(cfg) != pooling:
        raise ConfigError(cfg.at("roipooling"), "differs from BboxRFCN_Pre's")
    agnostic = cfg.take("share_location", False, types=bool)
    relu = cfg.take("add_relu_after_feature_conv", False, types=bool)
    cfg.done(), head.done()
    _, size, sampling = pooling

    def nets():
        net = RFCNHead(planes, feat, n, size, stride, sampling, agnostic, relu)
        initialize(net, init)
        return [net]

    return nets, _box_kwargs(matcher, stds, batch, frac, read_bbox_post(post, stds, agnostic)), n


def _ps_pooling(cfg):
    rp = cfg.kwargs.get("roipooling")
    method = rp.get("method") if isinstance(rp, dict) else None
    if method == "roialignpool":
        raise ConfigError(cfg.at("roipooling.method"), "roialignpool is not mapped for R-FCN: UP pools the "
                          "position-sensitive maps as plain maps then (its head scores pool_size^2 x num_classes "
                          "classes)", "method: psroialign (torchvision ps_roi_align)")
    return read_roipooling(cfg, ("psroialign",))


def read_cascade(head, fpn):
    from ..det.rcnn import FCHead

    head.take("inplanes", fpn.out_channels, types=(list, int))
    feat = head.take("feat_planes", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    n = read_num_classes(head)
    init = read_initializer(head)
    cfg = head.sub("cfg")
    cls_weight = read_cls_loss(cfg, ("softmax_cross_entropy",), "box classification loss")
    beta, loc_weight = read_loc_loss(cfg, "box localisation loss")
    if cls_weight != 1.0 or loc_weight != 1.0:
        raise ConfigError(cfg.at("cls_loss"), "loss_weight other than 1 is not mapped (stage_weights weigh stages)")
    fpn_cfg = cfg.sub("fpn")
    levels = fpn_cfg.take("fpn_levels", types=list)
    if levels != list(range(len(levels))) or not levels or len(levels) > len(fpn.out_strides):
        raise ConfigError(fpn_cfg.at("fpn_levels"), f"{levels}: consecutive levels from 0 are mapped")
    fpn_cfg.take("base_scale", BASE_SCALE, only=BASE_SCALE, why="torchvision's level rule is UP's with 56")
    fpn_cfg.done()
    _, size, sampling = read_roipooling(cfg, ("roialignpool",))
    stages = cfg.take("num_stage", 3, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    weights = cfg.take("stage_weights", [1.0] * stages, types=list, check=lambda v: None if len(v) == stages and all(
        isinstance(w, (int, float)) for w in v) else f"expected {stages} numbers")
    ensemble = cfg.take("test_ensemble", True, types=bool)
    stds = read_stage_stds(cfg, "stage_bbox_normalize", stages)
    agnostic = cfg.take("share_location", False, types=bool)
    _, sup = typed_part(cfg, "cascade_supervisor", ("cascade",), "cascade supervisor")
    sup.take("num_stage", stages, only=stages, why="the head's num_stage")
    if read_stage_stds(sup, "stage_bbox_normalize", stages) != stds:
        raise ConfigError(sup.at("stage_bbox_normalize"), "differs from the head's")
    matchers = read_stage_matchers(sup, stages)
    _, sampler = typed_part(sup, "sampler", ("naive",), "sampler")
    batch = sampler.take("batch_size", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    frac = sampler.take("positive_percent", types=float)
    sampler.done(), sup.done()
    _, pred = typed_part(cfg, "cascade_predictor", ("cascade",), "cascade predictor")
    pred.take("num_stage", stages, only=stages, why="the head's num_stage")
    if read_stage_stds(pred, "stage_bbox_normalize", stages) != stds:
        raise ConfigError(pred.at("stage_bbox_normalize"), "differs from the head's")
    pred.take("share_location", agnostic, only=agnostic, why="the head's share_location")
    score = pred.take("bbox_score_thresh", 0.0, types=float)
    nms = _nms_thresh(pred)
    top = pred.take("top_n", 100, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    pred.done(), cfg.done(), head.done()

    def nets():
        built = [FCHead(levels, fpn.out_channels, feat, n, size, sampling, agnostic) for _ in range(stages)]
        for net in built:
            initialize(net, init)
            net.init_outputs()  # UP: the class and box layers always start at N(0, 0.01) / N(0, 0.001)
        return built

    return nets, dict(**matchers, stds=stds, batch_size=batch, positive_fraction=frac, smooth_l1_beta=beta,
                      stage_weights=[float(w) for w in weights], test_ensemble=ensemble, score_thresh=score,
                      nms_thresh=nms, detections_per_img=top), n


# UP's names of the box heads' parameters -> ours (BoxStages keeps its nets under nets.{stage})
BOX_HEAD_RULES = {
    "c4": (r"^(layer4|fc_cls|fc_loc)\.", [(r"^(layer4|fc_cls|fc_loc)\.", r"nets.0.\1.")]),
    "rfcn": (r"^(new_conv|rfcn_score|rfcn_bbox)\.", [(r"^(new_conv|rfcn_score|rfcn_bbox)\.", r"nets.0.\1.")]),
    "cascade": (r"^fc6_list\.", [(r"^(fc6|fc7|fc_rcnn_cls|fc_rcnn_loc)_list\.(\d+)\.", r"nets.\2.\1.")]),
}


def build_two_stage_net(shape, net_cfg, path):
    """UP's ResNet, FPN and box nets (UP's weight names); the proposal and box stages' kwargs
    mapped onto the native builders' (:func:`up_trainer.tasks.det.rcnn.build.two_stage`)."""
    from ..det.rcnn.build import two_stage

    opts = entry_options(net_cfg, path)
    names = [e["name"] for e in net_cfg]
    trunk, sync = build_resnet(net_cfg[0]["type"], opts[0])
    neck = None
    if shape == "cascade":
        if trunk.out_layers != list(range(trunk.out_layers[0], 5)):
            raise ConfigError(opts[0].at("out_layers"), f"{trunk.out_layers}: an FPN needs consecutive stages up to 4")
        neck = read_fpn(opts[1], trunk)
        strides, channels = neck.out_strides, neck.out_channels
        rpn = read_rpn(opts[2], opts[3], strides, channels)
        nets, box, n = read_cascade(opts[4], neck)
        roles = dict(backbone=names[0], neck=names[1], rpn=names[2], box=names[4])
        classes_entry = 4
    else:
        channels, stride = _single_map(trunk, opts[0], "the C4 / R-FCN head")
        strides = [stride]
        rpn = read_rpn(opts[1], opts[2], strides, channels)
        nets, box, n = (read_c4 if shape == "c4" else read_rfcn)(opts[3:], channels, stride)
        roles = dict(backbone=names[0], neck=None, rpn=names[1], box=names[4])
        classes_entry = 4
    model = two_stage(roles, trunk, neck, strides, rpn, nets, box, n - 1)
    up_model_attrs(model, net_cfg, path, classes_entry, sync)
    rules = {names[0]: backbone_rules(net_cfg[0]["type"]), roles["box"]: BOX_HEAD_RULES[shape]}
    if neck is not None:
        n_in = len(trunk.out_layers)
        rules[names[1]] = fpn_rules(neck.up_start_level, n_in, len(neck.out_strides) - n_in)
    model.translate_up_weights = partial(translate, parts=rules)
    model.up_module_path = partial(module_path, parts=rules)  # UP's names in distill jobs
    return model
