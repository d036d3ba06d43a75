"""UP's ``DarkNetv5`` backbone, ``DarknetPAFPN`` neck and ``YoloV5Head`` (module names as UP's)."""
import math

import torch
from torch import nn

from ....errors import ConfigError
from .layers import SPP, BottleneckCSP, Concat, ConvBnAct, Focus


class DarkNetv5(nn.Module):
    """forward(image) -> the ``out_layers`` of [focus (stride 2), csp_modules 0..k (4, 8, 16, 32)]:
    the Focus stem to ``init_planes``, then per entry of ``csp1_block_nums`` a stride-2 conv
    doubling the channels and a BottleneckCSP of that many bottlenecks (the last with SPP and
    no shortcuts)."""

    def __init__(self, init_planes, csp1_block_nums, in_channels=3, out_layers=(2, 3, 4), act=nn.Hardswish):
        super().__init__()
        if len(csp1_block_nums) != 4:
            raise ConfigError("csp1_block_nums", f"four stages are mapped (UP's YOLOv5 files), got {csp1_block_nums}")
        plane = init_planes
        self.focus = Focus(in_channels, plane, 3, act=act)
        planes = [plane]
        self.csp_modules = nn.ModuleList()
        for i, nums in enumerate(csp1_block_nums):
            layers = [ConvBnAct(plane, plane * 2, 3, 2, act=act)]
            plane *= 2
            if i == len(csp1_block_nums) - 1:
                layers += [SPP(plane, plane, act=act), BottleneckCSP(plane, plane, nums, shortcut=False, act=act)]
            else:
                layers.append(BottleneckCSP(plane, plane, nums, act=act))
            self.csp_modules.append(nn.Sequential(*layers))
            planes.append(plane)
        self.out_layers = list(out_layers)
        self.out_channels = [planes[i] for i in self.out_layers]
        self.out_strides = [2 ** (i + 1) for i in self.out_layers]

    def forward(self, x):
        feats = [self.focus(x)]
        for stage in self.csp_modules:
            feats.append(stage(feats[-1]))
        return [feats[i] for i in self.out_layers]


class DarknetPAFPN(nn.Module):
    """forward([C3, C4, C5]) -> [P3, P4, P5]: top-down (1x1 conv halving, nearest 2x, concat,
    BottleneckCSP), then bottom-up (3x3 stride-2 conv, concat with the top-down conv's output,
    BottleneckCSP), laid out in UP's two module lists."""

    def __init__(self, inplanes, csp2_block_nums, act=nn.Hardswish):
        super().__init__()
        lines = len(inplanes) - 1
        plane = inplanes[-1]
        same = sum(inplanes[i] == inplanes[-1] for i in range(lines))
        self.up_sample_stream = nn.ModuleList()
        for i in range(lines):
            out = plane if i < same else plane // 2
            self.up_sample_stream.extend([ConvBnAct(plane, out, 1, 1, act=act), nn.Upsample(None, 2, "nearest"),
                                          Concat()])
            plane = out * 2
            self.up_sample_stream.append(BottleneckCSP(plane, plane // 2, csp2_block_nums, shortcut=False, act=act))
            plane //= 2
        self.down_sample_stream = nn.ModuleList()
        out_planes = [plane]
        for i in range(lines):
            self.down_sample_stream.extend([ConvBnAct(plane, plane, 3, 2, act=act), Concat()])
            plane *= 2
            cout = plane // 2 if i >= lines - same else plane
            self.down_sample_stream.append(BottleneckCSP(plane, cout, csp2_block_nums, shortcut=False, act=act))
            plane = cout
            out_planes.append(plane)
        self.out_channels = out_planes

    def forward(self, features):
        f, saved, lateral = features[-1], [], 0
        for m in self.up_sample_stream:
            if isinstance(m, Concat):
                lateral += 1
                f = m([f, features[-(lateral + 1)]])
            else:
                f = m(f)
                if isinstance(m, ConvBnAct):
                    saved.append(f)
        outs = [f]
        for m in self.down_sample_stream:
            if isinstance(m, Concat):
                f = m([f, saved[-len(outs)]])
            else:
                f = m(f)
                if isinstance(m, BottleneckCSP):
                    outs.append(f)
        return outs


class YoloV5Head(nn.Module):
    """forward([P3, P4, P5]) -> per level (box N x A*4 x H x W, class N x A*C, objectness N x A),
    raw: one 1x1 conv each (``loc_subnet``, ``cls_subnet``, ``obj_subnet``). Biases start as
    YOLOv5's: objectness + log(8 / (640 / stride)^2), classes + log(0.6 / (C - 0.99))."""

    def __init__(self, num_classes, in_channels, strides, num_anchors=3):
        super().__init__()
        self.num_classes, self.num_point, self.strides = num_classes, num_anchors, list(strides)
        self.cls_subnet, self.loc_subnet, self.obj_subnet = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for c in in_channels:
            self.cls_subnet.append(nn.Conv2d(c, num_anchors * num_classes, 1))
            self.loc_subnet.append(nn.Conv2d(c, num_anchors * 4, 1))
            self.obj_subnet.append(nn.Conv2d(c, num_anchors, 1))
        with torch.no_grad():
            for obj, cls, s in zip(self.obj_subnet, self.cls_subnet, self.strides):
                obj.bias += math.log(8 / (640 / s) ** 2)
                cls.bias += math.log(0.6 / (num_classes - 0.99))

    def forward(self, features):
        return [(self.loc_subnet[i](x), self.cls_subnet[i](x), self.obj_subnet[i](x)) for i, x in enumerate(features)]
