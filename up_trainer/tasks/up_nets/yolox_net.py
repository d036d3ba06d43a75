"""UP's YOLOX net list assembled from the parts of :mod:`up_trainer.tasks.det.yolox`.

``yolox_nano|tiny|s|m|l|x`` (or ``yolox`` with ``dep_mul``/``wid_mul``, or a ``resnet18/34/50/101``)
+ ``YoloxPAFPN`` + ``YoloXHead`` + ``yolox_post`` -> :class:`YoloxModel`. Every kwarg of those
entries is honoured or refused in one line naming it, with UP's defaults where a file leaves a
kwarg out (so the network is UP's, not the published YOLOX's where they differ):

- ``depthwise`` is per part and off unless given (UP's YOLOX-nano file makes only the backbone
  depthwise; the neck and head stay plain);
- the neck's CSP layers keep their residual adds (UP's; the YOLOX reference neck has none);
- BatchNorms start as torch's (eps 1e-5, momentum 0.1) or the ``normalize`` kwargs, and
  ``runtime.special_bn_init`` then sets YOLOX's 1e-3 / 0.03 as in UP; a frozen ``normalize``
  (``freeze_bn``, ``caffe_freeze_bn``, ``mqbench_freeze_bn`` of UP's quantization files) puts
  that norm in place of every BatchNorm of the part, as it does in a ResNet;
- ``num_classes`` counts the background (81 for COCO); the model predicts ``num_classes - 1``;
- the predictor keeps at most 300 detections per image, as UP's does.

UP-named weights (a UP-trained checkpoint as ``saver.pretrain_model``) load: UP's conv blocks
name their BatchNorm ``bn1`` and the Focus / SPP convs ``conv_block*``, and UP's space-to-depth
stacks the 2x2 pixel blocks in another order (top-left, top-right, bottom-left, bottom-right;
ours top-left, bottom-left, top-right, bottom-right), so the stem conv's input channels are
permuted on load.
"""
from functools import partial

from torch import nn

from ...errors import ConfigError, join_path
from .keymap import backbone_rules, translate
from .layers import StatsFrozenBatchNorm2d, initialize, norm_layer, read_initializer
from .options import entry_options, sub_options, typed_part

PARTS = ("YoloxPAFPN", "YoloXHead", "yolox_post")
FAMILY = "YOLOX"  # in refusals: "UP loss 'x' is not mapped for ..."
RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101")
STAGE_STRIDES = (2, 4, 8, 16, 32)  # CSPDarknet's stem, dark2 .. dark5
UP_TOP_N = 300  # UP's yolox predictor: detections kept per image
ACT_NAMES = "Silu, ReLU, LeakyReLU, Hardswish"
FOCUS_TYPES = {"v5_focus": "focus", "stem_focus": "stem_focus"}  # UP's focus_type -> CSPDarknet's stem


def backbone_types():
    from ..det.yolox import SIZES

    return tuple(f"yolox_{size}" for size in SIZES) + ("yolox",)


def _built(opts, build, *args, **kwargs):
    """Call a model-package constructor; its ConfigError paths are relative to this entry's kwargs."""
    try:
        return build(*args, **kwargs)
    except ConfigError as exc:
        raise ConfigError(opts.at(exc.path) if exc.path else opts.path, exc.message, exc.hint) from None


def _act(opts):
    from ..det.yolox.layers import check_act

    kind, kw = sub_options(opts, "act_fn", "activation", default={"type": "Silu"})
    try:
        act = check_act(kind)
    except ConfigError:
        raise ConfigError(opts.at("act_fn.type"), f"UP activation {kind!r} is not mapped for YOLOX",
                          f"supported: {ACT_NAMES}") from None
    kw.done()
    return act


class _Norm:
    """A part's normalization: its sync_bn group (None: plain BatchNorm) and, for the YOLOX
    parts, the eps/momentum their BatchNorms start with, or the frozen norm (``freeze_bn``,
    ``caffe_freeze_bn``, ``mqbench_freeze_bn``) that replaces each of their BatchNorms."""

    def __init__(self, sync, path, eps=None, momentum=None, frozen=None):
        self.sync, self.path, self.eps, self.momentum, self.frozen = sync, path, eps, momentum, frozen

    def apply(self, module):
        if self.frozen is not None:
            _swap_batchnorms(module, self.frozen)
            return
        if self.eps is None:
            return
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eps, m.momentum = self.eps, self.momentum


def _swap_batchnorms(module, factory):
    """Every BatchNorm2d under ``module`` replaced by ``factory(channels)``. The parts build
    their BatchNorms themselves; this runs right after, before any weight is loaded, so the
    fresh norms' (1, 0, 0, 1) start is all there is to carry over (the factory's own)."""
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):  # the parts' WarmStartBatchNorm2d too
            setattr(module, name, factory(child.num_features))
        else:
            _swap_batchnorms(child, factory)


def read_norm(opts):
    """A YOLOX part's ``normalize``: BatchNorm2d (solo_bn, or a sync_bn kind, made SyncBatchNorm
    when distributed) with torch's eps/momentum unless given; a frozen kind (``freeze_bn``,
    ``caffe_freeze_bn``, ``mqbench_freeze_bn``, as for a ResNet) replaces every BatchNorm2d."""
    from torchvision.ops.misc import FrozenBatchNorm2d

    factory, sync = norm_layer(opts, default="solo_bn")
    base = factory.func if isinstance(factory, partial) else factory
    if base in (StatsFrozenBatchNorm2d, FrozenBatchNorm2d):
        return _Norm(None, opts.at("normalize"), frozen=factory)
    if base is not nn.BatchNorm2d:
        raise ConfigError(opts.at("normalize.type"), "YOLOX parts are built with BatchNorm2d or a frozen one",
                          "use solo_bn, sync_bn, freeze_bn or mqbench_freeze_bn")
    keywords = factory.keywords if isinstance(factory, partial) else {}
    return _Norm(sync, opts.at("normalize"), keywords.get("eps", 1e-5), keywords.get("momentum", 0.1))


def _int_list(value):
    return None if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                                   for v in value) else "expected a list of integers"


# -- backbone --------------------------------------------------------------------------------
def read_cspdarknet(kind, opts):
    from ..det.yolox import SIZES, CSPDarknet

    if kind == "yolox":  # UP's yolox_dyn: the multipliers given
        depth = opts.take("dep_mul", types=float, check=lambda v: None if v > 0 else "must be > 0")
        width = opts.take("wid_mul", types=float, check=lambda v: None if v > 0 else "must be > 0")
    else:
        depth, width, _ = SIZES[kind[len("yolox_"):]]
    out_layers = opts.take("out_layers", [2, 3, 4], types=list, check=lambda v: _int_list(v) or (
        None if len(v) == 3 and list(v) == sorted(set(v)) and all(0 <= i <= 4 for i in v) else
        "YoloxPAFPN takes three increasing stages out of 0..4 (stem, dark2 .. dark5)"))
    want = [STAGE_STRIDES[i] for i in out_layers]
    opts.take("out_strides", want, types=list, only=want, why="the strides of the out_layers stages")
    norm = read_norm(opts)
    act = _act(opts)
    depthwise = opts.take("depthwise", False, types=bool)
    init = read_initializer(opts)
    focus = opts.take("focus_type", "v5_focus", types=str, check=lambda v: None if v in FOCUS_TYPES else
                      f"{v!r} is not mapped (v5_focus: the Focus stem, stem_focus: UP's FPGA stem of three convs; "
                      "UP's v4_focus stem is not mapped)")
    spp_pool = opts.take("use_spp_pool", True, types=bool)
    in_channels = opts.take("input_channels", 3, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    opts.done()
    net = _built(opts, CSPDarknet, depth, width, out_layers=out_layers, depthwise=depthwise, act=act,
                 in_channels=in_channels, stem=FOCUS_TYPES[focus], spp="pool" if spp_pool else "dilated")
    norm.apply(net)
    initialize(net, init)
    return net, list(net.out_channels), list(net.out_strides), norm


def read_resnet(kind, opts):
    from .backbones import build_resnet

    trunk, sync = build_resnet(kind, opts)
    if len(trunk.out_layers) != 3:
        raise ConfigError(opts.at("out_layers"), f"{trunk.out_layers}: YoloxPAFPN takes three stages",
                          "e.g. out_layers: [2, 3, 4]")
    return trunk, list(trunk.out_planes), list(trunk.out_strides), _Norm(sync, opts.at("normalize"))


# -- neck, head ------------------------------------------------------------------------------
def read_pafpn(opts, planes, strides):
    from ..det.yolox import YoloxPAFPN

    opts.take("inplanes", planes, types=list, only=planes, why="the backbone's output channels")
    depth = opts.take("depth", 0.33, types=float, check=lambda v: None if v > 0 else "must be > 0")
    opts.take("out_strides", strides, types=list, only=strides,
              why="the backbone's three levels (UP's extra downsampled levels are not mapped)")
    depthwise = opts.take("depthwise", False, types=bool)
    act = _act(opts)
    opts.take("upsample", "nearest", types=str, only="nearest", why="YOLOX upsamples with nearest")
    opts.take("align_corners", True, types=(bool, type(None)))  # no effect with nearest upsampling
    norm = read_norm(opts)
    opts.take("downsample_plane", 256, types=int)  # channels of extra levels, which three levels have none of
    opts.done()
    neck = _built(opts, YoloxPAFPN, planes, depth, depthwise=depthwise, act=act, shortcut=True)
    norm.apply(neck)
    return neck, norm


def _classes(opts, key="num_classes"):
    return opts.take(key, types=int, check=lambda v: None if v >= 2 else "counts the background too: at least 2")


def read_head(opts, planes, anchored=False):
    """YoloXHead; ``anchored``: under a RetinaNet post-process, where ``num_point`` anchors sit
    on each grid point (YOLOX's own post-process predicts one box per point)."""
    from ..det.yolox import YoloXHead

    num_classes = _classes(opts)
    if anchored:
        num_point = opts.take("num_point", 1, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    else:
        num_point = opts.take("num_point", 1, types=int, only=1, why="YOLOX predicts one box per point")
    width = opts.take("width", 0.375, types=float, check=lambda v: None if v > 0 else "must be > 0")
    opts.take("inplanes", planes, types=list, only=planes, why="the neck's output channels")
    outplanes = opts.take("outplanes", 256, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    act = _act(opts)
    depthwise = opts.take("depthwise", False, types=bool)
    init = read_initializer(opts)
    opts.take("class_activation", "sigmoid", types=str, only="sigmoid", why="YOLOX scores classes with sigmoids")
    norm = read_norm(opts)
    prior = opts.take("init_prior", 0.01, types=float, check=lambda v: None if 0 < v < 1 else "must be in (0, 1)")
    opts.done()
    channels = int(outplanes * width)
    if channels < 1:
        raise ConfigError(opts.at("width"), f"outplanes {outplanes} x width {width} leaves no channels")
    head = _built(opts, YoloXHead, num_classes - 1, planes, channels, depthwise=depthwise, act=act, prior_prob=prior,
                  num_point=num_point)
    norm.apply(head)
    if init is not None:  # UP initializes, then sets the prior biases again
        initialize(head, init)
        head.init_prior(prior)
    return head, num_classes, norm


# -- yolox_post ------------------------------------------------------------------------------
def _same_classes(opts, num_classes):
    opts.take("num_classes", num_classes, types=int, only=num_classes, why="the head's num_classes")


def _bce(cfg, key):
    kw = typed_part(cfg, key, ("sigmoid_cross_entropy",), "loss", family=FAMILY)[1]
    kw.take("loss_weight", 1.0, types=float, only=1.0, why="YOLOX's class and objectness losses are unweighted")
    kw.take("reduction", "mean", types=str, only="mean")
    kw.ignore("name", "a log label")
    kw.done()


def read_post(opts, num_classes):
    """(criterion and postprocess kwargs, use_l1) of ``yolox_post``."""
    from ..det.yolox import IOU_KINDS

    _same_classes(opts, num_classes)
    opts.take("norm_on_bbox", False, types=bool, only=False, why="YOLOX decodes sizes as exp(output) x stride")
    opts.take("all_reduce_norm", True, types=bool, only=True,
              why="the losses are divided by the positives averaged over processes")
    use_l1 = opts.take("use_l1", False, types=bool)
    opts.ignore("prefix", "a log label")
    cfg = opts.sub("cfg")
    for key in ("train", "test"):
        cfg.take(key, None, only=None, why="one setting serves training and evaluation")
    loc = typed_part(cfg, "loc_loss", ("iou_loss",), "loss", family=FAMILY)[1]
    iou_kind = loc.take("loss_type", "iou", types=str, check=lambda v: None if v in IOU_KINDS else
                        f"expected one of {', '.join(IOU_KINDS)}")
    iou_weight = loc.take("loss_weight", 1.0, types=float)
    loc.take("reduction", "mean", types=str, only="mean")
    loc.ignore("name", "a log label")
    loc.done()
    _bce(cfg, "cls_loss")
    _bce(cfg, "obj_loss")
    points = typed_part(cfg, "anchor_generator", ("fcos",), "anchor generator", family=FAMILY)[1]
    points.take("dense_points", 1, types=int, only=1, why="YOLOX predicts one box per point")
    points.take("center", False, types=bool, only=False, why="YOLOX's grid points sit at the cells' corners")
    points.done()
    sup = typed_part(cfg, "roi_supervisor", ("ota",), "roi_supervisor", family=FAMILY)[1]
    _same_classes(sup, num_classes)
    sup.take("norm_on_bbox", False, types=bool, only=False)
    sup.ignore("return_gts", "an output for debugging")
    matcher = typed_part(sup, "matcher", ("ota",), "matcher", family=FAMILY)[1]
    sup.done()
    _same_classes(matcher, num_classes)
    matcher.take("center_sample", True, types=bool, only=True, why="SimOTA's candidates are centre-sampled")
    matcher.ignore("pos_radius", "UP's ota matcher does not read it")
    candidate_k = matcher.take("candidate_k", 10, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    radius = matcher.take("radius", 2.5, types=float, check=lambda v: None if v > 0 else "must be > 0")
    matcher.done()
    pred = typed_part(cfg, "roi_predictor", ("yolox",), "roi_predictor", family=FAMILY)[1]
    _same_classes(pred, num_classes)
    score = pred.take("pre_nms_score_thresh", types=float, check=lambda v: None if 0 <= v <= 1 else
                      "must be in [0, 1]")
    nms = pred.take("nms", types=dict)
    if set(nms) - {"type", "nms_iou_thresh"} or nms.get("type", "naive") != "naive" \
            or not isinstance(nms.get("nms_iou_thresh"), (int, float)):
        raise ConfigError(pred.at("nms"), f"{nms} is not mapped", "expected {type: naive, nms_iou_thresh: x}")
    pred.done()
    cfg.done()
    opts.done()
    return dict(iou_kind=iou_kind, iou_weight=iou_weight, candidate_k=candidate_k, center_radius=radius,
                score_thresh=score, nms_thresh=float(nms["nms_iou_thresh"])), use_l1


# -- the model -------------------------------------------------------------------------------
def read_parts(kind, opts, anchored=False):
    """(backbone, neck, head, num_classes with background, strides, backbone norm) of the first
    three entries: a CSPDarknet or resnet, ``YoloxPAFPN``, ``YoloXHead`` (``anchored``: see
    :func:`read_head`)."""
    if kind in RESNETS:
        backbone, planes, strides, bb_norm = read_resnet(kind, opts[0])
    else:
        backbone, planes, strides, bb_norm = read_cspdarknet(kind, opts[0])
    neck, neck_norm = read_pafpn(opts[1], planes, strides)
    head, num_classes, head_norm = read_head(opts[2], planes, anchored)
    for norm in (neck_norm, head_norm):
        if norm.sync != bb_norm.sync:
            raise ConfigError(norm.path, "differs from the backbone's normalize in sync_bn",
                              "one batch-norm kind (solo_bn or sync_bn) serves the whole YOLOX net")
    return backbone, neck, head, num_classes, strides, bb_norm


def up_weight_translation(kind, names):
    """The model's ``translate_up_weights`` for UP's names of these parts."""
    return partial(translate_up_weights, names=names[:3],
                   backbone=backbone_rules(kind) if kind in RESNETS else CSP_RULES)


def build_yolox_net(net_cfg, path):
    from ..det.yolox import SimOTAAssigner, YoloxCriterion, YoloxModel, YoloxPostprocess

    opts = entry_options(net_cfg, path)
    kind = net_cfg[0]["type"]
    backbone, neck, head, num_classes, strides, bb_norm = read_parts(kind, opts)
    post, use_l1 = read_post(opts[3], num_classes)
    criterion = YoloxCriterion(num_classes - 1, post["iou_kind"], post["iou_weight"],
                               SimOTAAssigner(center_radius=post["center_radius"], candidate_k=post["candidate_k"]))
    # No cap before NMS, as in UP. (UP's predictor keeps only each point's best class; here every
    # (point, class) above the threshold goes into torchvision's per-class NMS.)
    postprocess = YoloxPostprocess(post["score_thresh"], post["nms_thresh"], pre_nms_top_n=10**9,
                                   detections_per_img=UP_TOP_N)
    model = YoloxModel(backbone, neck, head, criterion, postprocess, strides, use_l1=use_l1)
    model.num_classes_counts_background = True
    model.num_classes_path = join_path(join_path(path, 2), "kwargs.num_classes")
    model.sync_bn_group_size = bb_norm.sync
    model.up_part_names = [e["name"] for e in net_cfg]
    model.translate_up_weights = up_weight_translation(kind, model.up_part_names)
    return model


# -- UP's parameter names ----------------------------------------------------------------------
BN_RULES = (r"(.*\.)?bn1\.", [(r"(^|\.)bn1\.", r"\1bn.")])  # the neck and head: only the BatchNorm's name
CSP_RULES = (r"(.*\.)?(bn1|conv_block\d?)\.", [
    (r"^stem\.conv_block\.", "stem.conv."), (r"\.conv_block1\.", ".conv1."), (r"\.conv_block2\.", ".conv2."),
    (r"(^|\.)bn1\.", r"\1bn."),
])
UP_STEM = "backbone.stem.conv_block.conv.weight"
OUR_BLOCKS_FROM_UP = (0, 2, 1, 3)  # our k-th 2x2-pixel channel block is UP's block OUR_BLOCKS_FROM_UP[k]


def translate_up_weights(state, names, backbone):
    """``state`` with UP's names (entry names ``names`` for backbone, neck, head) rewritten to the
    YoloxModel's; a state already in our names passes unchanged."""
    ours = ("backbone", "neck", "roi_head")
    prefixes = {f"{up}.": f"{own}." for up, own in zip(names, ours) if up != own}
    state = {next((prefixes[p] + k[len(p):] for p in prefixes if k.startswith(p)), k): v for k, v in state.items()}
    stem = state.get(UP_STEM)
    if stem is not None and stem.dim() == 4 and stem.shape[1] % 4 == 0:
        c = stem.shape[1] // 4
        state = dict(state)
        state[UP_STEM] = stem.reshape(stem.shape[0], 4, c, *stem.shape[2:])[:, list(OUR_BLOCKS_FROM_UP)] \
            .reshape(stem.shape)
    return translate(state, {"backbone": backbone, "neck": BN_RULES, "roi_head": BN_RULES})
