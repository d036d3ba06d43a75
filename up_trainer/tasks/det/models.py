"""torchvision detectors by name: ``retinanet``, ``fcos``, ``faster_rcnn``, ``ssdlite``.

``net: {type: fcos, kwargs: {num_classes: 10, backbone: resnet18, min_size: 64, ...}}``.
The result is a :class:`DetectionModel` whose top-level children are ``backbone`` (the
torchvision feature extractor), ``neck`` (the FPN; absent for ssdlite), ``head`` (the dense
head; Faster R-CNN's roi_heads) and, for Faster R-CNN, ``rpn``. The torchvision detector
reaches them through proxies that look them up by name at every call, so a hook may wrap or
replace a top-level child (memory checkpointing) and the detector follows. ``pretrained``
(whole detector, torchvision or our key layout; ``coco``: torchvision's COCO weights where it
publishes this architecture) and ``pretrained_backbone`` (an ImageNet classifier;
``imagenet``: torchvision's for ``backbone``) take a name or a local file
(:mod:`up_trainer.pretrained`), loaded tolerantly.
"""
import logging
from collections import OrderedDict
from typing import List, Optional, Tuple

import torch
from torch import nn

from ...errors import ConfigError
from ...registry import MODELS
from ...weights import load_fitting, load_weights, under_backbone

log = logging.getLogger("up")
BACKBONES = ("resnet18", "resnet34", "resnet50", "mobilenet_v3_large")
FPN_EXTRAS = ("p6p7", "maxpool", "none")
EVAL_LOSS_KINDS = ("retinanet", "fcos")  # eval forward with targets: detections and losses in one pass


class _Proxy(nn.Module):
    """Calls the owner's top-level children ``names`` in sequence, looked up at call time;
    other attribute reads (``compute_loss``) go to the last one."""

    def __init__(self, owner, names):
        super().__init__()
        self._owner = [owner]  # a list, so the owner is not registered as our child (no cycle)
        self._names = list(names)

    def forward(self, *args, **kwargs):
        owner = self._owner[0]
        out = getattr(owner, self._names[0])(*args, **kwargs)
        for name in self._names[1:]:
            out = getattr(owner, name)(out)
        return out

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(getattr(self._owner[0], self._names[-1]), name)


def _extra_block(kind, channels, path="fpn_extra"):
    from torchvision.ops.feature_pyramid_network import ExtraFPNBlock, LastLevelMaxPool, LastLevelP6P7

    class _NoExtra(ExtraFPNBlock):
        """Adds no level (torchvision's default would add a max-pool level)."""

        def forward(self, results: List[torch.Tensor], x: List[torch.Tensor],
                    names: List[str]) -> Tuple[List[torch.Tensor], List[str]]:  # typed: TorchScript export
            return results, names

    if kind not in FPN_EXTRAS:
        raise ConfigError(path, f"{kind!r} is not one of {', '.join(FPN_EXTRAS)}")
    return {"p6p7": lambda: LastLevelP6P7(channels, channels), "maxpool": LastLevelMaxPool,
            "none": _NoExtra}[kind]()


def _freeze(body, trainable, layer_names):
    """Freeze all but the last ``trainable`` named stages, as torchvision's builders do."""
    keep = layer_names[len(layer_names) - trainable:] if trainable > 0 else []
    if trainable >= len(layer_names):
        keep.append("bn1")  # the stem's norm trains with the stem conv, as in torchvision
    for name, p in body.named_parameters():
        if not any(name.startswith(k) for k in keep):
            p.requires_grad_(False)


def build_fpn_backbone(name, returned_layers, fpn_channels, fpn_extra, trainable_layers, frozen_bn):
    """(body, fpn, out_channels) for resnet* or mobilenet_v3_large; returned_layers are stage
    numbers (resnet: 1-4 = strides 4-32; mobilenet: stage indices, default its last two)."""
    import torchvision
    from torchvision.models._utils import IntermediateLayerGetter
    from torchvision.ops import FeaturePyramidNetwork
    from torchvision.ops.misc import FrozenBatchNorm2d

    if name not in BACKBONES:
        raise ConfigError("backbone", f"{name!r} is not one of {', '.join(BACKBONES)}")
    norm = FrozenBatchNorm2d if frozen_bn else nn.BatchNorm2d
    if name.startswith("resnet"):
        returned_layers = list(returned_layers or (2, 3, 4))
        if not returned_layers or any(k not in (1, 2, 3, 4) for k in returned_layers):
            raise ConfigError("returned_layers", f"resnet stages are 1..4, got {returned_layers}")
        net = torchvision.models.get_model(name, weights=None, norm_layer=norm)
        _freeze(net, 5 if trainable_layers is None else trainable_layers,
                ["layer4", "layer3", "layer2", "layer1", "conv1"][::-1])
        stage2 = net.inplanes // 8
        in_channels = [stage2 * 2 ** (k - 1) for k in returned_layers]
        body = IntermediateLayerGetter(net, {f"layer{k}": str(i) for i, k in enumerate(returned_layers)})
    else:
        net = torchvision.models.mobilenet_v3_large(weights=None, norm_layer=norm).features
        stages = [0] + [i for i, b in enumerate(net) if getattr(b, "_is_cn", False)] + [len(net) - 1]
        returned_layers = list(returned_layers or (len(stages) - 2, len(stages) - 1))
        if any(not 0 <= k < len(stages) for k in returned_layers):
            raise ConfigError("returned_layers", f"mobilenet_v3_large stages are 0..{len(stages) - 1}, "
                              f"got {returned_layers}")
        trainable = len(stages) if trainable_layers is None else trainable_layers  # None: train all
        freeze_before = stages[len(stages) - trainable] if trainable < len(stages) else 0
        for p in net[:freeze_before].parameters():
            p.requires_grad_(False)
        in_channels = [net[stages[k]].out_channels for k in returned_layers]
        body = IntermediateLayerGetter(net, {str(stages[k]): str(i) for i, k in enumerate(returned_layers)})
    fpn = FeaturePyramidNetwork(in_channels, fpn_channels, extra_blocks=_extra_block(fpn_extra, fpn_channels))
    return body, fpn, fpn_channels


def _feature_strides(body, fpn, size=256):
    """Strides of the pyramid levels, measured: anchors follow whatever levels are configured."""
    was = body.training
    body.eval(), fpn.eval()
    with torch.no_grad():
        feats = fpn(body(torch.zeros(1, 3, size, size)))
    body.train(was), fpn.train(was)
    return [size // f.shape[-1] for f in feats.values()]


def _anchor_sizes(anchor_sizes, strides, per_octave, base):
    """Per-level anchor size tuples: user's (a number per level -> octave scales, or a list per
    level) or ``base * stride`` per level."""
    if anchor_sizes is None:
        anchor_sizes = [base * s for s in strides]
    if len(anchor_sizes) != len(strides):
        raise ConfigError("anchor_sizes", f"{len(anchor_sizes)} entries for {len(strides)} pyramid levels "
                          f"(strides {strides})")
    out = []
    for a in anchor_sizes:
        if isinstance(a, (list, tuple)):
            out.append(tuple(float(x) for x in a))
        else:
            out.append(tuple(float(a) * 2 ** (i / per_octave) for i in range(per_octave)))
    return tuple(out)


class DetectionModel(nn.Module):
    """A torchvision detector taking and returning dicts.

    forward(batch): ``batch["image"]`` a list of float CxHxW (or an NxCxHxW tensor),
    ``batch["target"]`` a list of {boxes xyxy, labels 1..C} (training). Training returns the
    torchvision losses, every key containing "loss"; eval returns ``{"detections": [{boxes,
    scores, labels}, ...]}`` in the coordinates of the images passed in, and for RetinaNet and
    FCOS, when the batch has targets, their losses as well (the validation loss; one pass).
    """

    def __init__(self, kind, detector, num_classes, parts):
        super().__init__()
        self.kind, self.num_classes = kind, num_classes
        for name, module in parts.items():
            self.add_module(name, module)
        self.__dict__["detector"] = detector  # not a child: its parameters are ours, by proxy

    def train(self, mode=True):
        super().train(mode)
        self.detector.train(mode)  # the transform and loss code read detector.training
        return self

    def forward(self, batch):
        if isinstance(batch, torch.Tensor):  # a bare NxCxHxW tensor (flops counting, tracing)
            batch = {"image": batch}
        images = batch["image"]
        if isinstance(images, torch.Tensor) and images.dim() == 4:
            images = list(images)
        if self.training:
            targets = [{"boxes": t["boxes"], "labels": t["labels"]} for t in batch["target"]]
            losses = self.detector(images, targets)
            weights = getattr(self.detector, "up_loss_weights", None) or {}  # a UP file's loss_weight
            losses = {k: v * weights[k] if k in weights else v for k, v in losses.items()}
            return {(k if "loss" in k else f"loss_{k}"): v for k, v in losses.items()}
        if batch.get("target") is not None and self.kind in EVAL_LOSS_KINDS:  # evaluation: the val loss too
            from .eval_loss import detections_and_losses

            dets, losses = detections_and_losses(self.detector, self.kind, images, batch["target"])
            return {"detections": dets, **{(k if "loss" in k else f"loss_{k}"): v for k, v in losses.items()}}
        return {"detections": self.detector(images)}

    # -- weights -------------------------------------------------------------------------------
    _TV_PREFIXES = (("module.", ""), ("backbone.body.", "backbone."), ("backbone.fpn.", "neck."),
                    ("roi_heads.", "head."))

    def load_pretrained(self, path, backbone_only=False):
        """Load what fits from a local file; report (never fail on) the rest."""
        state = {}
        for key, value in load_weights(path).items():
            for old, new in self._TV_PREFIXES:
                if key.startswith(old):
                    key = new + key[len(old):]
            state[key] = value
        own = self.state_dict()
        if backbone_only:  # an ImageNet classifier: conv1.weight -> backbone.conv1.weight
            state = under_backbone(state, own)
        # BatchNorm's batch counter is no weight (torchvision's ImageNet files predate it)
        scope = [k for k in own if k.startswith("backbone.") and not k.endswith(".num_batches_tracked")] \
            if backbone_only else None
        return load_fitting(self, state, f"pretrained {path}", scope=scope)


def _common_kwargs(min_size, max_size, image_mean, image_std):
    kw = {"min_size": min_size, "max_size": max_size}
    if image_mean is not None:
        kw["image_mean"] = list(image_mean)
    if image_std is not None:
        kw["image_std"] = list(image_std)
    return kw


def build_detector(kind, num_classes, backbone="resnet50", returned_layers=None, fpn_channels=256,
                   fpn_extra=None, trainable_layers=None, frozen_bn=False, min_size=800, max_size=1333,
                   image_mean=None, image_std=None, anchor_sizes=None, aspect_ratios=None, score_thresh=None,
                   nms_thresh=None, detections_per_img=100, head_convs=4, pretrained=None,
                   pretrained_backbone=None, det_kwargs=None):
    from torchvision.models.detection import FCOS, FasterRCNN, RetinaNet
    from torchvision.models.detection.ssd import SSD
    from torchvision.models.detection.anchor_utils import AnchorGenerator, DefaultBoxGenerator
    from torchvision.models.detection.fcos import FCOSHead

    if num_classes < 1:
        raise ConfigError("num_classes", f"must be >= 1 (foreground classes), got {num_classes}")
    if fpn_channels < 1 or (kind == "fcos" and fpn_channels % 32):
        raise ConfigError("fpn_channels", f"got {fpn_channels}; fcos needs a multiple of 32 (GroupNorm(32))")
    n_out = num_classes + 1  # torchvision reserves label 0 for the background
    common = _common_kwargs(min_size, max_size, image_mean, image_std)
    extra = dict(det_kwargs or {})
    for key, value in (("score_thresh", score_thresh), ("nms_thresh", nms_thresh)):
        if value is not None:
            extra[("box_" + key) if kind == "faster_rcnn" else key] = value
    extra[("box_" if kind == "faster_rcnn" else "") + "detections_per_img"] = detections_per_img
    ratios = tuple(float(r) for r in (aspect_ratios or ((1.0,) if kind == "fcos" else (0.5, 1.0, 2.0))))
    if kind == "ssdlite":
        model = _build_ssdlite(backbone, n_out, min_size, trainable_layers, frozen_bn, common, extra, SSD,
                               DefaultBoxGenerator)
        _load(model, kind, backbone, pretrained, pretrained_backbone, None)
        return model
    default_extra = {"faster_rcnn": "maxpool"}.get(kind, "p6p7")
    body, fpn, ch = build_fpn_backbone(backbone, returned_layers, fpn_channels, fpn_extra or default_extra,
                                       trainable_layers, frozen_bn)
    strides = _feature_strides(body, fpn)
    chain = nn.Sequential(OrderedDict(body=body, fpn=fpn))
    chain.out_channels = ch
    try:
        if kind == "fcos":
            anchors = AnchorGenerator(_anchor_sizes(anchor_sizes, strides, 1, 1), (ratios,) * len(strides))
            det = FCOS(chain, n_out, anchor_generator=anchors, head=FCOSHead(ch, 1, n_out, num_convs=head_convs),
                       **common, **extra)
        elif kind == "retinanet":
            anchors = AnchorGenerator(_anchor_sizes(anchor_sizes, strides, 3, 4), (ratios,) * len(strides))
            det = RetinaNet(chain, n_out, anchor_generator=anchors, **common, **extra)
        else:
            from torchvision.ops import MultiScaleRoIAlign

            anchors = AnchorGenerator(_anchor_sizes(anchor_sizes, strides, 1, 8), (ratios,) * len(strides))
            levels = [str(i) for i in range(len(body.return_layers))]  # RoIAlign on the backbone levels
            det = FasterRCNN(chain, n_out, rpn_anchor_generator=anchors,
                             box_roi_pool=MultiScaleRoIAlign(levels, output_size=7, sampling_ratio=2),
                             **common, **extra)
    except TypeError as exc:
        raise ConfigError("det_kwargs", f"torchvision {kind}: {exc}") from None
    parts = {"backbone": body, "neck": fpn}
    if kind == "faster_rcnn":
        parts.update(rpn=det.rpn, head=det.roi_heads)
        det.rpn, det.roi_heads = None, None
    else:
        parts["head"] = det.head
        det.head = None
    model = DetectionModel(kind, det, num_classes, parts)
    det.backbone = _Proxy(model, ["backbone", "neck"])
    det.backbone.out_channels = ch
    if kind == "faster_rcnn":
        det.rpn, det.roi_heads = _Proxy(model, ["rpn"]), _Proxy(model, ["head"])
    else:
        det.head = _Proxy(model, ["head"])
    model.strides = strides
    _load(model, kind, backbone, pretrained, pretrained_backbone, returned_layers)
    return model


def _build_ssdlite(backbone, n_out, size, trainable_layers, frozen_bn, common, extra, SSD, DefaultBoxGenerator):
    from functools import partial

    import torchvision
    from torchvision.models.detection import _utils as det_utils
    from torchvision.models.detection.ssdlite import SSDLiteHead, _mobilenet_extractor
    from torchvision.ops.misc import FrozenBatchNorm2d

    if backbone != "mobilenet_v3_large":
        raise ConfigError("backbone", f"ssdlite runs on mobilenet_v3_large only, got {backbone!r}")
    norm = FrozenBatchNorm2d if frozen_bn else partial(nn.BatchNorm2d, eps=0.001, momentum=0.03)
    net = torchvision.models.mobilenet_v3_large(weights=None, norm_layer=norm, reduced_tail=True)
    body = _mobilenet_extractor(net, 6 if trainable_layers is None else min(trainable_layers, 6), norm)
    anchors = DefaultBoxGenerator([[2, 3] for _ in range(6)], min_ratio=0.2, max_ratio=0.95)
    out_channels = det_utils.retrieve_out_channels(body, (size, size))
    head = SSDLiteHead(out_channels, anchors.num_anchors_per_location(), n_out, norm)
    common = {k: v for k, v in common.items() if k not in ("min_size", "max_size")}
    common.setdefault("image_mean", [0.5, 0.5, 0.5])
    common.setdefault("image_std", [0.5, 0.5, 0.5])
    try:
        det = SSD(body, anchors, (size, size), n_out, head=head, **common, **extra)
    except TypeError as exc:
        raise ConfigError("det_kwargs", f"torchvision ssdlite: {exc}") from None
    det.backbone, det.head = None, None
    model = DetectionModel("ssdlite", det, n_out - 1, {"backbone": body, "head": head})
    det.backbone, det.head = _Proxy(model, ["backbone"]), _Proxy(model, ["head"])
    return model


def _load(model, kind, backbone, pretrained, pretrained_backbone, returned_layers):
    """Weights by name or file (:func:`up_trainer.pretrained.weights_path`): the backbone's first,
    then the whole detector's over them."""
    from ...pretrained import weights_path
    from ...pretrained.catalog import coco_detector

    # SSDlite's extractor regroups MobileNet's blocks: an ImageNet classifier's names do not reach it
    imagenet = "its MobileNet extractor regroups the classifier's blocks; " \
        "pretrained: coco loads torchvision's whole SSDlite" \
        if kind == "ssdlite" else backbone
    pretrained_backbone = weights_path(pretrained_backbone, "pretrained_backbone", imagenet=imagenet)
    pretrained = weights_path(pretrained, "pretrained", coco=coco_detector(kind, backbone, returned_layers))
    if pretrained_backbone:
        model.load_pretrained(pretrained_backbone, backbone_only=True)
    if pretrained:
        model.load_pretrained(pretrained)


def _make_builder(kind, doc):
    # Typed kwargs: the registry checks YAML values against this signature before building.
    def build(num_classes: int = 80, backbone: str = "resnet50", returned_layers: Optional[list] = None,
              fpn_channels: int = 256, fpn_extra: Optional[str] = None, trainable_layers: Optional[int] = None,
              frozen_bn: bool = False, min_size: int = 800, max_size: int = 1333,
              image_mean: Optional[list] = None, image_std: Optional[list] = None,
              anchor_sizes: Optional[list] = None, aspect_ratios: Optional[list] = None,
              score_thresh: Optional[float] = None, nms_thresh: Optional[float] = None,
              detections_per_img: int = 100, head_convs: int = 4, pretrained: Optional[str] = None,
              pretrained_backbone: Optional[str] = None, det_kwargs: Optional[dict] = None):
        if kind == "ssdlite" and backbone == "resnet50":
            backbone = "mobilenet_v3_large"  # the only backbone ssdlite has
        if head_convs != 4 and kind != "fcos":
            raise ConfigError("head_convs", "only fcos has a configurable head depth")
        return build_detector(kind, num_classes, backbone, returned_layers, fpn_channels, fpn_extra,
                              trainable_layers, frozen_bn, min_size, max_size, image_mean, image_std,
                              anchor_sizes, aspect_ratios, score_thresh, nms_thresh, detections_per_img,
                              head_convs, pretrained, pretrained_backbone, det_kwargs)

    build.__name__ = build.__qualname__ = kind
    build.__doc__ = doc
    return build


for _kind, _doc in {
    "retinanet": "torchvision RetinaNet (focal loss, anchors: 3 scales per octave x aspect_ratios).",
    "fcos": "torchvision FCOS (anchor-free; anchor_sizes = one size per level, default its stride).",
    "faster_rcnn": "torchvision Faster R-CNN (RPN + RoIAlign box head; FPN with a max-pool level).",
    "ssdlite": "torchvision SSDlite on mobilenet_v3_large; min_size is the fixed square input size.",
}.items():
    MODELS.register(_kind, aliases={"faster_rcnn": ("fasterrcnn",)}.get(_kind, ()))(_make_builder(_kind, _doc))
