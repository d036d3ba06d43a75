"""The static parts of a BigNAS subnet: the ResNet-basic trunk, the FPN and the RetinaNet head
UP builds once a subnet is chosen (``bignas_resnet_basic``, ``bignas_fpn``,
``BignasRetinaHeadWithBN``), with UP's module names so that UP's subnet checkpoints load by
name and a supernet checkpoint slices onto them (:mod:`.bignas_weights`).

- trunk: a stem (``first_conv``: three convs of the stage-0 kernel, the middle width
  ``out * expand_ratio`` rounded to a multiple of 8; or one conv without ``deep_stem``), a
  2x2 max-pool, then per stage ``depth`` basic blocks (two convs of the stage's kernel, the
  first one's width ``out * expand_ratio`` rounded likewise, a 1x1 conv shortcut where the
  shape changes) numbered ``blocks.0``, ``blocks.1``... across stages;
- FPN: laterals then output convs, each conv + norm without activation; extra levels by
  stride-2 convs with a bias from the top lateral (``downsample: conv``) or a stride-2
  max-pool of the top output (``pool``);
- head: cls / box towers whose convs are shared by all levels, a norm per level after each
  (``mlvl_heads[level][i] = (conv, norm, relu)``), then 3x3 prediction convs.
"""
from collections import OrderedDict

import torch.nn.functional as F
from torch import nn

from ..det.anchor_head import FocalHeadInit


def make_divisible(value, divisor=8):
    """UP's channel rounding: the nearest multiple of ``divisor`` (at least one), never more than
    10% below ``value``."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_norm_act(cin, cout, kernel, norm, stride=1, act=True):
    layers = [("conv", nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)), ("bn", norm(cout))]
    if act:
        layers.append(("act", nn.ReLU()))
    return nn.Sequential(OrderedDict(layers))


class StemBlock(nn.Module):
    def __init__(self, cin, cout, kernel, expand_ratio, stride, norm):
        super().__init__()
        mid = make_divisible(cout * expand_ratio)
        self.point_conv1 = conv_norm_act(cin, mid, kernel, norm, stride)
        self.normal_conv = conv_norm_act(mid, mid, kernel, norm)
        self.point_conv2 = conv_norm_act(mid, cout, kernel, norm)

    def forward(self, x):
        return self.point_conv2(self.normal_conv(self.point_conv1(x)))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, kernel, expand_ratio, stride, norm, divisor):
        super().__init__()
        mid = make_divisible(cout * expand_ratio, divisor)
        self.normal_conv1 = conv_norm_act(cin, mid, kernel, norm, stride)
        self.normal_conv2 = conv_norm_act(mid, cout, kernel, norm, act=False)
        self.shortcut = None if cin == cout and stride == 1 else conv_norm_act(cin, cout, 1, norm, stride, act=False)

    def forward(self, x):
        out = self.normal_conv2(self.normal_conv1(x))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class BigNASResNetBasic(nn.Module):
    """Returns the maps of ``out_layers`` (0 the stem, 1..4 the stages after it)."""

    def __init__(self, depth, out_channel, kernel_size, expand_ratio, out_layers, norm, deep_stem,
                 stage_strides=(2, 1, 2, 2, 2), use_maxpool=True, divisor=8, frozen_layers=()):
        super().__init__()
        self.out_layers, self.frozen_layers = list(out_layers), list(frozen_layers)
        if deep_stem:
            self.first_conv = StemBlock(3, out_channel[0], kernel_size[0], expand_ratio[0], stage_strides[0], norm)
        else:
            self.first_conv = conv_norm_act(3, out_channel[0], kernel_size[0], norm, stage_strides[0])
        self.max_pool = nn.MaxPool2d(2, 2, ceil_mode=True) if use_maxpool else None
        blocks, self.stage_ends, cin = [], [], out_channel[0]
        for stage in range(1, len(depth)):
            stride = (1 if use_maxpool else 2) if stage == 1 else stage_strides[stage]
            for i in range(depth[stage]):
                blocks.append(BasicBlock(cin, out_channel[stage], kernel_size[stage], expand_ratio[stage],
                                         stride if i == 0 else 1, norm, divisor))
                cin = out_channel[stage]
            self.stage_ends.append(len(blocks) - 1)
        self.blocks = nn.ModuleList(blocks)
        self.out_planes = [out_channel[i] for i in self.out_layers]
        self._freeze()

    def _stages(self):
        """Stage 0 (the stem), then each stage's blocks."""
        starts = [0] + [end + 1 for end in self.stage_ends[:-1]]
        return [[self.first_conv]] + [list(self.blocks[a:b + 1]) for a, b in zip(starts, self.stage_ends)]

    def _freeze(self):
        stages = self._stages()
        for layer in self.frozen_layers:
            for module in stages[layer]:
                module.eval()
                for p in module.parameters():
                    p.requires_grad_(False)

    def train(self, mode=True):
        super().train(mode)
        self._freeze()  # frozen stages keep their statistics, as UP's freeze_layer does
        return self

    def forward(self, x):
        x = self.first_conv(x)
        outs = [x]
        if self.max_pool is not None:
            x = self.max_pool(x)
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in self.stage_ends:
                outs.append(x)
        return [outs[i] for i in self.out_layers]


def _conv(cin, cout, kernel, norm, stride=1):
    """UP's static ConvBlock without activation: conv + norm, or a conv with a bias."""
    layers = [("conv", nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=norm is None))]
    if norm is not None:
        layers.append(("bn", norm(cout)))
    return nn.Sequential(OrderedDict(layers))


class BigNASFPN(nn.Module):
    """forward(list of trunk maps) -> list of ``num_level`` maps; modules ``c{l}_lateral``,
    ``p{l}_conv`` and ``p{l}_{downsample}`` named from ``start_level`` as in UP."""

    def __init__(self, inplanes, inter_planes, out_planes, kernels, num_level, start_level, downsample, norm,
                 use_p5=False):
        super().__init__()
        n = len(inplanes)
        self.n_in, self.num_level, self.start_level = n, num_level, start_level
        self.downsample, self.use_p5 = downsample, use_p5
        for i, planes in enumerate(inplanes):
            self.add_module(f"c{i + start_level}_lateral", _conv(planes, inter_planes, kernels[i], norm))
            self.add_module(f"p{i + start_level}_conv", _conv(inter_planes, out_planes, kernels[n + i], norm))
        for i in range(n, num_level):
            name = f"p{i + start_level}_{downsample}"
            if downsample == "pool":
                self.add_module(name, nn.MaxPool2d(1, 2))
            else:
                cin = inter_planes if i == n and not use_p5 else out_planes
                self.add_module(name, _conv(cin, out_planes, kernels[n + i], None, stride=2))
        self.out_channels = out_planes

    def forward(self, feats):
        laterals = [getattr(self, f"c{i + self.start_level}_lateral")(x) for i, x in enumerate(feats)]
        for i in range(self.n_in - 2, -1, -1):
            laterals[i] = laterals[i] + F.interpolate(laterals[i + 1], size=laterals[i].shape[-2:], mode="nearest")
        outs = [getattr(self, f"p{i + self.start_level}_conv")(x) for i, x in enumerate(laterals)]
        x = outs[-1] if self.downsample == "pool" or self.use_p5 else laterals[-1]
        for i in range(self.n_in, self.num_level):
            x = getattr(self, f"p{i + self.start_level}_{self.downsample}")(x)
            outs.append(x)
        return outs


class Tower(nn.Module):
    """UP's BignasRoiHead: ``depth`` convs shared by every level, a norm per level after each."""

    def __init__(self, cin, channels, depth, kernel, levels, norm):
        super().__init__()
        convs = [nn.Sequential(OrderedDict(conv=nn.Conv2d(cin if i == 0 else channels, channels, kernel, 1,
                                                           kernel // 2, bias=False))) for i in range(depth)]
        self.mlvl_heads = nn.ModuleList(nn.Sequential(*(nn.Sequential(conv, norm(channels), nn.ReLU())
                                                        for conv in convs)) for _ in range(levels))

    def forward(self, x, level):
        return self.mlvl_heads[level](x)


class BigNASRetinaHead(FocalHeadInit, nn.Module):
    """forward(list of maps) -> per level (cls [N, A*C, H, W], loc [N, A*4, H, W])."""

    def __init__(self, cin, num_classes, num_anchors, levels, kernel, cls_tower, box_tower, norm, prior=0.01):
        super().__init__()
        self.num_classes, self.num_anchors, self.num_levels = num_classes, num_anchors, levels
        self.iou_branch = False
        (cls_ch, cls_depth), (box_ch, box_depth) = cls_tower, box_tower
        self.cls_subnet = Tower(cin, cls_ch, cls_depth, kernel, levels, norm)
        self.box_subnet = Tower(cin, box_ch, box_depth, kernel, levels, norm)
        self.cls_subnet_pred = nn.Conv2d(cls_ch, num_anchors * num_classes, 3, 1, 1)
        self.box_subnet_pred = nn.Conv2d(box_ch, num_anchors * 4, 3, 1, 1)
        self.init_weights(0.01, prior)

    def forward(self, features):
        if len(features) != self.num_levels:
            raise ValueError(f"the head was built for {self.num_levels} levels, got {len(features)}")
        return [(self.cls_subnet_pred(self.cls_subnet(x, lvl)), self.box_subnet_pred(self.box_subnet(x, lvl)))
                for lvl, x in enumerate(features)]
