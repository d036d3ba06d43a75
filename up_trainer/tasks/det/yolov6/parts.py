"""YOLOv6 as UP builds it (UP's yolov6 plugin): the EfficientRep backbone, the
Rep-PAN neck and the efficient decoupled head, with UP's module names so UP-trained weights
load as they are. Widths and depths come from UP's ``net_info``: each base channel count x
``width_multiple`` rounded up to a multiple of 8, each base repeat count above 1 x
``depth_multiple`` rounded (at least 1).

Every part takes ``norm(channels)`` (a BatchNorm factory) and ``act()`` (an activation
factory): the UP reader decides what UP's ``normalize`` and ``act_fn`` are.
"""
import math

import torch
from torch import nn

from ....errors import ConfigError
from .rep import RepBlock, RepVGGBlock


def net_info(depth_multiple, width_multiple, backbone_base_repeats, backbone_base_channels, neck_base_repeats,
             neck_base_channels):
    """(channels, repeats) of the backbone's five stages then the neck's layers, as UP's net_info."""
    repeats = [max(round(n * depth_multiple), 1) if n > 1 else n
               for n in list(backbone_base_repeats) + list(neck_base_repeats)]
    channels = [math.ceil(c * width_multiple / 8) * 8 for c in list(backbone_base_channels) + list(neck_base_channels)]
    return channels, repeats


class ConvBnAct(nn.Module):
    """UP's ``Conv`` / ``SimConv``: conv (no bias, ``kernel_size // 2`` padding), ``bn``, ``act``."""

    def __init__(self, cin, cout, kernel_size, stride=1, norm=nn.BatchNorm2d, act=nn.ReLU):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size, stride, kernel_size // 2, bias=False)
        self.bn = norm(cout)
        self.act = act()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class SimSPPF(nn.Module):
    """Simplified SPPF: 1x1 to half the channels, three chained 5x5 max pools, the four
    concatenated, 1x1 to ``cout``."""

    def __init__(self, cin, cout, kernel_size=5, norm=nn.BatchNorm2d, act=nn.ReLU):
        super().__init__()
        hidden = cin // 2
        self.cv1 = ConvBnAct(cin, hidden, 1, norm=norm, act=act)
        self.cv2 = ConvBnAct(hidden * 4, cout, 1, norm=norm, act=act)
        self.m = nn.MaxPool2d(kernel_size, 1, kernel_size // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat([x, y1, y2, self.m(y2)], 1))


class Transpose(nn.Module):
    """2x upsampling by a 2x2 stride-2 transposed convolution with bias."""

    def __init__(self, cin, cout):
        super().__init__()
        self.upsample_transpose = nn.ConvTranspose2d(cin, cout, 2, 2, bias=True)

    def forward(self, x):
        return self.upsample_transpose(x)


def _stage(cin, cout, n, norm, act, sppf=False):
    layers = [RepVGGBlock(cin, cout, stride=2, norm=norm, act=act), RepBlock(cout, cout, n, norm=norm, act=act)]
    if sppf:
        layers.append(SimSPPF(cout, cout, 5, norm=norm, act=act))
    return nn.Sequential(*layers)


class EfficientRep(nn.Module):
    """forward(image) -> [C3, C4, C5] (strides 8, 16, 32): a stride-2 RepVGG stem, then four
    stages of a stride-2 RepVGG block and a RepBlock (``ERBlock_2`` .. ``ERBlock_5``; the last
    ends with SimSPPF)."""

    def __init__(self, channels, repeats, in_channels=3, norm=nn.BatchNorm2d, act=nn.ReLU):
        super().__init__()
        if in_channels < 1:
            raise ConfigError("input_channels", f"must be >= 1, got {in_channels}")
        self.stem = RepVGGBlock(in_channels, channels[0], stride=2, norm=norm, act=act)
        for i in range(1, 5):
            setattr(self, f"ERBlock_{i + 1}", _stage(channels[i - 1], channels[i], repeats[i], norm, act, sppf=i == 4))
        self.out_channels = [channels[2], channels[3], channels[4]]
        self.out_strides = [8, 16, 32]

    def forward(self, x):
        x = self.ERBlock_2(self.stem(x))
        c3 = self.ERBlock_3(x)
        c4 = self.ERBlock_4(c3)
        return [c3, c4, self.ERBlock_5(c4)]


class RepPANNeck(nn.Module):
    """forward([C3, C4, C5]) -> [P3, P4, P5]: top-down (1x1 reduce, transposed-conv upsample,
    concat, RepBlock) then bottom-up (3x3 stride-2 conv, concat with the reduced map, RepBlock)."""

    def __init__(self, channels, repeats, norm=nn.BatchNorm2d, act=nn.ReLU):
        super().__init__()
        c, n = channels, repeats
        self.Rep_p4 = RepBlock(c[3] + c[5], c[5], n[5], norm=norm, act=act)
        self.Rep_p3 = RepBlock(c[2] + c[6], c[6], n[6], norm=norm, act=act)
        self.Rep_n3 = RepBlock(c[6] + c[7], c[8], n[7], norm=norm, act=act)
        self.Rep_n4 = RepBlock(c[5] + c[9], c[10], n[8], norm=norm, act=act)
        self.reduce_layer0 = ConvBnAct(c[4], c[5], 1, norm=norm, act=act)
        self.upsample0 = Transpose(c[5], c[5])
        self.reduce_layer1 = ConvBnAct(c[5], c[6], 1, norm=norm, act=act)
        self.upsample1 = Transpose(c[6], c[6])
        self.downsample2 = ConvBnAct(c[6], c[7], 3, 2, norm=norm, act=act)
        self.downsample1 = ConvBnAct(c[8], c[9], 3, 2, norm=norm, act=act)
        self.out_channels = [c[6], c[8], c[10]]

    def forward(self, features):
        x2, x1, x0 = features
        fpn_out0 = self.reduce_layer0(x0)
        f_out0 = self.Rep_p4(torch.cat([self.upsample0(fpn_out0), x1], 1))
        fpn_out1 = self.reduce_layer1(f_out0)
        pan_out2 = self.Rep_p3(torch.cat([self.upsample1(fpn_out1), x2], 1))
        pan_out1 = self.Rep_n3(torch.cat([self.downsample2(pan_out2), fpn_out1], 1))
        pan_out0 = self.Rep_n4(torch.cat([self.downsample1(pan_out1), fpn_out0], 1))
        return [pan_out2, pan_out1, pan_out0]


class Effidehead(nn.Module):
    """forward([P3, P4, P5]) -> per level (cls N x A*C x H x W, reg N x A*4 x H x W, obj N x A x
    H x W), raw. Per level at the level's own channels: a 1x1 stem, one 3x3 conv for classes and
    one for boxes, 1x1 predictions (``anchors`` = A per point). Class and objectness biases start
    at the prior ``-log((1 - p) / p)``.

    ``last_stem_norm`` / ``last_stem_act``: the third level's stem, which UP builds with its
    defaults (BatchNorm, SiLU) whatever ``normalize`` / ``act_fn`` say."""

    def __init__(self, num_classes, in_channels, anchors=1, prior_prob=0.01, norm=nn.BatchNorm2d, act=nn.SiLU,
                 last_stem_norm=nn.BatchNorm2d, last_stem_act=nn.SiLU):
        super().__init__()
        if num_classes < 1:
            raise ConfigError("num_classes", f"must be >= 1 (foreground classes), got {num_classes}")
        self.num_classes, self.num_point = num_classes, anchors
        self.stems, self.cls_convs, self.reg_convs = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        self.cls_preds, self.reg_preds, self.obj_preds = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for i, c in enumerate(in_channels):
            last = i == 2
            self.stems.append(ConvBnAct(c, c, 1, norm=last_stem_norm if last else norm,
                                        act=last_stem_act if last else act))
            self.cls_convs.append(ConvBnAct(c, c, 3, norm=norm, act=act))
            self.reg_convs.append(ConvBnAct(c, c, 3, norm=norm, act=act))
            self.cls_preds.append(nn.Conv2d(c, num_classes * anchors, 1))
            self.reg_preds.append(nn.Conv2d(c, 4 * anchors, 1))
            self.obj_preds.append(nn.Conv2d(c, anchors, 1))
        self.init_prior(prior_prob)

    def init_prior(self, prior_prob):
        for conv in list(self.cls_preds) + list(self.obj_preds):
            nn.init.constant_(conv.bias, -math.log((1 - prior_prob) / prior_prob))

    def forward(self, features):
        out = []
        for i, x in enumerate(features):
            x = self.stems[i](x)
            reg_feat = self.reg_convs[i](x)
            out.append((self.cls_preds[i](self.cls_convs[i](x)), self.reg_preds[i](reg_feat),
                        self.obj_preds[i](reg_feat)))
        return out
