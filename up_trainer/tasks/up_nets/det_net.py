"""UP's detection net lists assembled from torchvision parts.

* resnet + ``FPN`` + ``RetinaSubNet`` + ``retina_post`` -> torchvision RetinaNet;
* resnet + ``FPN`` + ``NaiveRPN`` + ``rpn_post`` + ``BboxFC_Pre`` + ``BboxFC`` + ``bbox_post``
  -> torchvision Faster R-CNN.

The model is the project's :class:`DetectionModel` whose children carry UP's entry names
(``backbone``, ``neck``, ``roi_head``, ``bbox_head``), so UP-trained weights load through the
name map in :mod:`.det_keymap`. UP's ``num_classes`` counts the background (81 for COCO);
``model.num_classes`` is the foreground count. What torchvision does differently is listed
in docs/up/ ("Coming from UP").
"""
from collections import OrderedDict
from functools import partial

from torch import nn

from ...errors import ConfigError, join_path
from .backbones import build_resnet
from .det_parts import UPExtraLevels
from .det_readers import read_faster, read_retina
from .keymap import BOX_HEAD, RETINA_HEAD, RPN_HEAD, backbone_rules, fpn_rules, module_path, translate
from .layers import initialize, norm_layer, read_initializer
from .options import entry_options


def read_fpn(opts, trunk, norm_ok=False):
    """torchvision FPN with UP's extra levels, and its UP naming base (``start_level``).
    ``norm_ok``: UP's ``normalize`` is honoured (a norm after every lateral and output conv,
    which then have no bias; the extra levels' convs stay plain, as in UP); the torchvision
    RetinaNet / Faster R-CNN mappings keep plain FPN convs."""
    from torchvision.ops import FeaturePyramidNetwork

    inplanes = opts.take("inplanes", trunk.out_planes, types=list)
    if inplanes != trunk.out_planes:
        raise ConfigError(opts.at("inplanes"), f"{inplanes} but the backbone gives {trunk.out_planes}")
    out = opts.take("outplanes", types=int)
    start = opts.take("start_level", trunk.out_layers[0] + 1, types=int)
    num_level = opts.take("num_level", types=int, check=lambda v: None if v >= len(inplanes) else
                          f"must be at least the {len(inplanes)} backbone levels")
    want = list(trunk.out_strides) + [trunk.out_strides[-1] * 2 ** (i + 1) for i in range(num_level - len(inplanes))]
    opts.take("out_strides", types=list, only=want, why="the strides follow from the backbone's and num_level")
    downsample = opts.take("downsample", types=str, check=lambda v: None if v in ("pool", "conv") else
                           "expected pool or conv")
    upsample = opts.take("upsample", "nearest", types=str, check=lambda v: None if v in ("nearest", "deconv") else
                         "expected nearest or deconv (a 4x4 stride-2 transposed conv)")
    opts.take("align_corners", True, types=(bool, type(None)))  # no effect with nearest upsampling
    norm = None
    if norm_ok and opts.kwargs.get("normalize") is not None:
        norm, _ = norm_layer(opts)
    else:
        opts.take("normalize", None, only=None, why="torchvision's FPN here has plain convolutions")
    use_p5 = opts.take("use_p5", False, types=bool)
    opts.take("skip", False, only=False)
    init = read_initializer(opts)
    opts.done()
    extra = UPExtraLevels(num_level - len(inplanes), downsample, out, use_p5)
    fpn_class = FeaturePyramidNetwork
    if upsample == "deconv":
        from .deconv_fpn import DeconvFPN as fpn_class
    fpn = fpn_class(inplanes, out, extra_blocks=extra, norm_layer=norm)
    extra.attach(fpn)
    initialize(fpn, init)
    fpn.up_start_level, fpn.out_channels = start, out
    fpn.out_strides = want
    return fpn


def build_detector(shape, net_cfg, path):
    from ..det.models import DetectionModel, _Proxy

    opts = entry_options(net_cfg, path)
    names = [e["name"] for e in net_cfg]
    trunk, sync_group = build_resnet(net_cfg[0]["type"], opts[0])
    if len(trunk.out_layers) < 2 or trunk.out_layers != list(range(trunk.out_layers[0], 5)):
        raise ConfigError(opts[0].at("out_layers"), f"{trunk.out_layers}: an FPN needs consecutive stages up to 4")
    fpn = read_fpn(opts[1], trunk)
    chain = nn.Sequential(OrderedDict(body=trunk, fpn=fpn))
    chain.out_channels = fpn.out_channels
    if shape == "retinanet":
        det, num_classes = read_retina(opts[2], opts[3], fpn, _BodyAsDict(chain))
        parts = {names[0]: trunk, names[1]: fpn, names[2]: det.head}
        det.head = None
    else:
        det, num_classes = read_faster(opts[2:], fpn, _BodyAsDict(chain))
        parts = {names[0]: trunk, names[1]: fpn, names[2]: det.rpn, names[5]: det.roi_heads}
        det.rpn, det.roi_heads = None, None
    model = DetectionModel(shape, det, num_classes, parts)
    det.backbone = _Proxy(model, [names[0], "_as_dict", names[1]])
    det.backbone.out_channels = fpn.out_channels
    model.__dict__["_as_dict"] = _to_dict
    if shape == "retinanet":
        det.head = _Proxy(model, [names[2]])
        model.num_classes_path = join_path(join_path(path, 3), "kwargs.num_classes")
    else:
        det.rpn, det.roi_heads = _Proxy(model, [names[2]]), _Proxy(model, [names[5]])
        model.num_classes_path = join_path(join_path(path, 5), "kwargs.num_classes")
    model.num_classes_counts_background = True
    model.sync_bn_group_size = sync_group
    model.up_part_names = names
    model.up_weight_rules = _weight_rules(shape, net_cfg[0]["type"], names, fpn, len(trunk.out_layers))
    model.translate_up_weights = partial(translate, parts=model.up_weight_rules)
    model.up_module_path = partial(module_path, parts=model.up_weight_rules)  # UP's names in distill jobs
    model.strides = fpn.out_strides
    return model


def _weight_rules(shape, backbone_type, names, fpn, n_in):
    rules = {names[0]: backbone_rules(backbone_type),
             names[1]: fpn_rules(fpn.up_start_level, n_in, len(fpn.out_strides) - n_in)}
    if shape == "retinanet":
        rules[names[2]] = RETINA_HEAD
    else:
        rules[names[2]], rules[names[5]] = RPN_HEAD, BOX_HEAD
    return rules


def _to_dict(features):
    """The trunk's list of maps as the ordered dict torchvision's FPN reads."""
    return OrderedDict((str(i), f) for i, f in enumerate(features))


class _BodyAsDict(nn.Module):
    """Only for measuring while building: trunk -> dict -> FPN, as the proxy runs them."""

    def __init__(self, chain):
        super().__init__()
        self.chain = [chain]
        self.out_channels = chain.out_channels

    def forward(self, x):
        chain = self.chain[0]
        return chain.fpn(_to_dict(chain.body(x)))


def up_model_attrs(model, net_cfg, path, classes_entry, sync):
    model.num_classes_counts_background = True
    model.num_classes_path = join_path(join_path(path, classes_entry), "kwargs.num_classes")
    model.sync_bn_group_size = sync
    model.up_part_names = [e["name"] for e in net_cfg]
