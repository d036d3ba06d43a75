"""The native net types of the two-stage family: ``faster_rcnn_c4``, ``rfcn`` and
``cascade_rcnn``. Each is a torchvision ResNet (the stride-16 C4 map, or an FPN for the cascade)
under :func:`.stages.region_proposals` and :func:`.stages.box_stages`; every kwarg is documented
in docs/detection/two_stage.rst. UP's files (:mod:`up_trainer.tasks.up_nets.rcnn_net`) keep UP's
ResNet, FPN and box nets (UP's weight names) and map the rest of their kwargs onto the same two
functions."""
from typing import List, Optional, Union

from torch import nn

from ....errors import ConfigError
from .heads import FCHead, Res5Head, RFCNHead
from .model import TwoStageModel
from .stages import BOX_STDS, box_stages, region_proposals

RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101")
NAMES = dict(backbone="backbone", neck="neck", rpn="rpn", box="roi_head")
CASCADE_STDS = [[0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1], [0.033, 0.033, 0.067, 0.067]]


def _resnet(backbone, frozen_bn, dilated=False):
    import torchvision
    from torchvision.ops.misc import FrozenBatchNorm2d

    if backbone not in RESNETS:
        raise ConfigError("backbone", f"{backbone!r} is not one of {', '.join(RESNETS)}")
    extra = dict(replace_stride_with_dilation=[False, False, True]) if dilated else {}
    return torchvision.models.get_model(backbone, weights=None,
                                        norm_layer=FrozenBatchNorm2d if frozen_bn else nn.BatchNorm2d, **extra)


def dilated_c5_trunk(backbone, trainable_layers, frozen_bn):
    """(a torchvision ResNet-50 / 101 whose stage 5 is dilated, giving C5 at stride 16, its
    channels): R-FCN's one feature map, as UP's R-FCN files take it."""
    from torchvision.models._utils import IntermediateLayerGetter

    from ..models import _freeze

    if backbone not in RESNETS[2:]:
        raise ConfigError("backbone", f"{backbone!r}: R-FCN dilates stage 5 of a bottleneck ResNet",
                          f"use one of {', '.join(RESNETS[2:])}")
    net = _resnet(backbone, frozen_bn, dilated=True)
    _freeze(net, 5 if trainable_layers is None else trainable_layers,
            ["layer4", "layer3", "layer2", "layer1", "conv1"][::-1])
    return IntermediateLayerGetter(net, {"layer4": "0"}), net.inplanes


def c4_trunk(backbone, trainable_layers, frozen_bn):
    """(stages 1-4 of a torchvision ResNet giving the stride-16 C4 map, its channels, a fresh
    stage 5 with its first block at stride 1, stage 5's output channels)."""
    from torchvision.models._utils import IntermediateLayerGetter

    from ..models import _freeze

    net = _resnet(backbone, frozen_bn)
    _freeze(net, 5 if trainable_layers is None else trainable_layers,
            ["layer4", "layer3", "layer2", "layer1", "conv1"][::-1])
    channels = net.layer3[-1].conv1.in_channels
    body = IntermediateLayerGetter(net, {"layer3": "0"})
    layer4 = _resnet(backbone, frozen_bn).layer4
    return body, channels, layer4, net.inplanes


def res5_at_stride(layer4, stride):
    """Stage 5 with its first block at ``stride`` (UP's BboxRes5: pool_size // 7)."""
    first = layer4[0]
    conv = first.conv2 if hasattr(first, "conv3") else first.conv1  # torchvision strides the 3x3 conv
    conv.stride = (stride, stride)
    first.downsample[0].stride = (stride, stride)
    return layer4


def _pool(pool_size, allowed=None):
    if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1 or (
            allowed and pool_size not in allowed):
        raise ConfigError("pool_size", f"expected {' or '.join(map(str, allowed)) if allowed else 'an integer >= 1'}"
                          f", got {pool_size!r}")


def _classes(num_classes):
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
        raise ConfigError("num_classes", f"must be an integer >= 1, got {num_classes!r}")


def two_stage(names, backbone, neck, strides, rpn_kwargs, box_net_list, box_kwargs, num_classes):
    """The :class:`TwoStageModel` of built parts: ``rpn_kwargs`` for :func:`.stages.region_proposals`
    (``in_channels`` and ``strides`` included), ``box_kwargs`` for :func:`.stages.box_stages`."""
    rpn = region_proposals(**rpn_kwargs)
    return TwoStageModel(names, backbone, neck, rpn, box_stages(box_net_list(), **box_kwargs), num_classes, strides)


RPN_KEYS = ("anchor_ratios", "anchor_scales", "rpn_channels", "rpn_fg_iou", "rpn_bg_iou", "rpn_low_quality_thresh",
            "rpn_batch_size", "rpn_positive_fraction", "rpn_pre_nms_top_n", "rpn_post_nms_top_n", "rpn_nms_thresh",
            "rpn_smooth_l1_beta")


def _rpn_kwargs(in_channels, strides, given):
    """The proposal stage's kwargs, taken from a builder's own (``given``: its arguments)."""
    return dict(in_channels=in_channels, strides=strides, **{k: given[k] for k in RPN_KEYS if k in given})


def _one_box_stage(given):
    """The box stage of a net with one (C4, R-FCN), from a builder's own arguments."""
    return dict(fg_iou=[given["box_fg_iou"]], bg_iou=[given["box_bg_iou"]], stds=[given["box_stds"]],
                batch_size=given["box_batch_size"], positive_fraction=given["box_positive_fraction"],
                smooth_l1_beta=given["box_smooth_l1_beta"], score_thresh=given["score_thresh"],
                nms_thresh=given["nms_thresh"], detections_per_img=given["detections_per_img"])


def faster_rcnn_c4(num_classes: int = 80, backbone: str = "resnet50", trainable_layers: Optional[int] = 3,
                   frozen_bn: bool = True, anchor_ratios: List[float] = (0.5, 1.0, 2.0),
                   anchor_scales: List[float] = (2.0, 4.0, 8.0, 16.0, 32.0), rpn_channels: Optional[int] = None,
                   rpn_fg_iou: float = 0.7, rpn_bg_iou: float = 0.3, rpn_low_quality_thresh: float = 0.0,
                   rpn_batch_size: int = 256,
                   rpn_positive_fraction: float = 0.5, rpn_pre_nms_top_n: Union[int, List[int]] = (12000, 6000),
                   rpn_post_nms_top_n: Union[int, List[int]] = (2000, 300), rpn_nms_thresh: float = 0.7,
                   rpn_smooth_l1_beta: float = 1 / 9, box_fg_iou: float = 0.5, box_bg_iou: float = 0.5,
                   box_batch_size: int = 512, box_positive_fraction: float = 0.25,
                   box_stds: List[float] = BOX_STDS, box_smooth_l1_beta: float = 1.0, pool_size: int = 14,
                   sampling_ratio: int = 0, class_agnostic: bool = False, score_thresh: float = 0.0,
                   nms_thresh: float = 0.5, detections_per_img: int = 100):
    """Faster R-CNN C4: RPN on the stride-16 C4 map, RoIAlign (``pool_size`` 7 or 14), ResNet
    stage 5 (its first block at stride ``pool_size // 7``), a global average, linear heads."""
    _classes(num_classes)
    _pool(pool_size, (7, 14))
    body, channels, layer4, out = c4_trunk(backbone, trainable_layers, frozen_bn)
    given = dict(locals())  # the arguments (the stages read their own names from it)
    rpn = _rpn_kwargs(channels, [16], given)
    box = _one_box_stage(given)
    net = lambda: [Res5Head(res5_at_stride(layer4, pool_size // 7), out, num_classes + 1, pool_size, 16,  # noqa: E731
                            sampling_ratio, class_agnostic)]
    return two_stage(dict(NAMES, neck=None), body, None, [16], rpn, net, box, num_classes)


def rfcn(num_classes: int = 80, backbone: str = "resnet50", trainable_layers: Optional[int] = 3,
         frozen_bn: bool = True, anchor_ratios: List[float] = (0.5, 1.0, 2.0),
         anchor_scales: List[float] = (2.0, 4.0, 8.0, 16.0, 32.0), rpn_channels: Optional[int] = None,
         rpn_fg_iou: float = 0.7, rpn_bg_iou: float = 0.3, rpn_low_quality_thresh: float = 0.0,
                   rpn_batch_size: int = 256,
         rpn_positive_fraction: float = 0.5, rpn_pre_nms_top_n: Union[int, List[int]] = (6000, 6000),
         rpn_post_nms_top_n: Union[int, List[int]] = (300, 300), rpn_nms_thresh: float = 0.7,
         rpn_smooth_l1_beta: float = 1 / 9, rfcn_channels: int = 1024, relu_after_feature_conv: bool = False,
         box_fg_iou: float = 0.5, box_bg_iou: float = 0.5, box_batch_size: int = 512,
         box_positive_fraction: float = 0.25, box_stds: List[float] = BOX_STDS, box_smooth_l1_beta: float = 1.0,
         pool_size: int = 7, sampling_ratio: int = 2, class_agnostic: bool = False, score_thresh: float = 0.0,
         nms_thresh: float = 0.5, detections_per_img: int = 100):
    """R-FCN: RPN on C5 at stride 16 (stage 5 dilated); a 1x1 conv to ``rfcn_channels``,
    position-sensitive class and box maps (``pool_size``^2 groups) pooled by ps_roi_align and
    averaged."""
    _classes(num_classes)
    _pool(pool_size)
    if not isinstance(rfcn_channels, int) or rfcn_channels < 1:
        raise ConfigError("rfcn_channels", f"must be an integer >= 1, got {rfcn_channels!r}")
    body, channels = dilated_c5_trunk(backbone, trainable_layers, frozen_bn)
    given = dict(locals())  # the arguments (the stages read their own names from it)
    rpn = _rpn_kwargs(channels, [16], given)
    box = _one_box_stage(given)
    net = lambda: [RFCNHead(channels, rfcn_channels, num_classes + 1, pool_size, 16, sampling_ratio,  # noqa: E731
                            class_agnostic, relu_after_feature_conv)]
    return two_stage(dict(NAMES, neck=None), body, None, [16], rpn, net, box, num_classes)


def cascade_rcnn(num_classes: int = 80, backbone: str = "resnet50", returned_layers: List[int] = (1, 2, 3, 4),
                 fpn_channels: int = 256, extra_levels: int = 1, trainable_layers: Optional[int] = 3,
                 frozen_bn: bool = True, anchor_ratios: List[float] = (0.5, 1.0, 2.0),
                 anchor_scales: List[float] = (8.0,), rpn_fg_iou: float = 0.7, rpn_bg_iou: float = 0.3,
                 rpn_low_quality_thresh: float = 0.0,
                 rpn_batch_size: int = 256, rpn_positive_fraction: float = 0.5,
                 rpn_pre_nms_top_n: Union[int, List[int]] = (2000, 1000),
                 rpn_post_nms_top_n: Union[int, List[int]] = (2000, 1000), rpn_nms_thresh: float = 0.7,
                 rpn_smooth_l1_beta: float = 1 / 9, roi_levels: int = 4, fc_channels: int = 1024,
                 stage_fg_iou: List[float] = (0.5, 0.6, 0.7), stage_bg_iou: List[float] = (0.5, 0.6, 0.7),
                 stage_stds: List[List[float]] = CASCADE_STDS, stage_weights: List[float] = (1.0, 0.5, 0.25),
                 test_ensemble: bool = True, box_batch_size: int = 512, box_positive_fraction: float = 0.25,
                 box_smooth_l1_beta: float = 1.0, pool_size: int = 7, sampling_ratio: int = 2,
                 class_agnostic: bool = True, score_thresh: float = 0.0, nms_thresh: float = 0.5,
                 detections_per_img: int = 100):
    """Cascade R-CNN: RPN on an FPN, then one FC box head per stage (RoIAlign on the first
    ``roi_levels`` levels, two fully connected layers), each stage refining the last one's
    boxes with its own IoU thresholds and box coder."""
    from ..pyramid_levels import fpn_trunk

    _classes(num_classes)
    _pool(pool_size)
    stages = len(stage_fg_iou)
    for key, values in (("stage_bg_iou", stage_bg_iou), ("stage_stds", stage_stds), ("stage_weights", stage_weights)):
        if len(values) != stages:
            raise ConfigError(key, f"{len(values)} values for the {stages} stages of stage_fg_iou")
    body, fpn, channels, strides = fpn_trunk(backbone, returned_layers, fpn_channels, extra_levels, trainable_layers,
                                             frozen_bn)
    if not isinstance(roi_levels, int) or not 1 <= roi_levels <= len(returned_layers):
        raise ConfigError("roi_levels", f"must be an integer in [1, {len(returned_layers)}] (the pyramid's levels "
                          "from the backbone)")
    given = dict(locals())  # the arguments (the stages read their own names from it)
    rpn = _rpn_kwargs(channels, strides, given)
    box = dict(fg_iou=list(stage_fg_iou), bg_iou=list(stage_bg_iou), stds=[list(s) for s in stage_stds],
               batch_size=box_batch_size, positive_fraction=box_positive_fraction, smooth_l1_beta=box_smooth_l1_beta,
               stage_weights=list(stage_weights), test_ensemble=test_ensemble, score_thresh=score_thresh,
               nms_thresh=nms_thresh, detections_per_img=detections_per_img)

    def nets():
        return [FCHead(range(roi_levels), channels, fc_channels, num_classes + 1, pool_size, sampling_ratio,
                       class_agnostic) for _ in stage_fg_iou]

    return two_stage(NAMES, body, fpn, strides, rpn, nets, box, num_classes)
