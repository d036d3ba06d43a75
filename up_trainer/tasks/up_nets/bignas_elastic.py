"""The elastic (weight-sharing) parts of a BigNAS supernet: UP's ``big_resnet_basic``, ``big_fpn``
and ``BigRetinaHeadWithBN``. Every tensor is allocated at the space's largest value; a forward
runs the subnet in ``active`` (per part: ``depth``, ``out_channel``, ``kernel_size``,
``expand_ratio`` per stage) on slices of it, as UP's dynamic ops do: each stage's first
``depth`` blocks, each weight's first output / input channels and the centre of its kernel,
each norm's first channels (running statistics updated in place through the slice). The
sliced ``conv`` and ``norm`` also run the RegNet classification supernet (:mod:`.bignas_regnet`).

Parameter names are UP's dynamic ones, so a supernet checkpoint (UP's or ours) slices into a
subnet (:mod:`.bignas_weights`) and UP's supernet checkpoints load here by name: a stage's first
block has a 1x1 ``shortcut`` conv and ``shortcutbn``; the head's prediction convs are
``cls_subnet_pred.conv`` / ``box_subnet_pred.conv``.
"""
import math
from collections import OrderedDict

import torch.nn.functional as F
from torch import nn

from .bignas_parts import BigNASFPN, BigNASRetinaHead, conv_norm_act, make_divisible


def conv(x, module, out=None, kernel=None, groups=1):
    """``module`` (an nn.Conv2d at full size) on ``x``'s channels, its first ``out`` filters
    and the centre ``kernel`` x ``kernel`` of each; in ``groups`` groups, each filter reads the
    first ``channels / groups`` of its stored inputs (UP's dynamic group conv)."""
    w = module.weight
    out = w.shape[0] if out is None else out
    kernel = w.shape[-1] if kernel is None else kernel
    start = (w.shape[-1] - kernel) // 2
    w = w[:out, :x.shape[1] // groups, start:start + kernel, start:start + kernel]
    bias = None if module.bias is None else module.bias[:out]
    return F.conv2d(x, w, bias, module.stride, kernel // 2, 1, groups)


def norm(x, bn):
    """BatchNorm ``bn`` over ``x``'s channels (the first ones of ``bn``)."""
    c = x.shape[1]
    if bn.training and bn.track_running_stats:
        bn.num_batches_tracked.add_(1)
    momentum = 0.1 if bn.momentum is None else bn.momentum
    return F.batch_norm(x, bn.running_mean[:c], bn.running_var[:c], bn.weight[:c], bn.bias[:c], bn.training,
                        momentum, bn.eps)


def _cna(x, seq, out, kernel, act=True):
    x = norm(conv(x, seq.conv, out, kernel), seq.bn)
    return F.relu(x) if act else x


class ElasticBlock(nn.Module):
    """UP's DynamicBasicBlock at its largest: a stage's first block keeps a 1x1 shortcut, used
    whenever the active block changes shape."""

    def __init__(self, cin, cout, kernel, expand, stride, norm_layer, first):
        super().__init__()
        mid = make_divisible(cout * expand)
        self.stride = stride
        self.normal_conv1 = conv_norm_act(cin, mid, kernel, norm_layer, stride)
        self.normal_conv2 = conv_norm_act(mid, cout, kernel, norm_layer, act=False)
        self.shortcut = self.shortcutbn = None  # identity: UP's blocks inside a stage
        if first or cin != cout or stride != 1:
            self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False)
            self.shortcutbn = norm_layer(cout)

    def forward(self, x, out, kernel, expand):
        mid = make_divisible(round(out * expand))
        y = _cna(_cna(x, self.normal_conv1, mid, kernel), self.normal_conv2, out, kernel, act=False)
        skip = x if x.shape[1] == out and self.stride == 1 else norm(conv(x, self.shortcut, out, 1), self.shortcutbn)
        return F.relu(y + skip)


class ElasticResNetBasic(nn.Module):
    def __init__(self, depth, out_channel, kernel_size, expand_ratio, out_layers, norm_layer, deep_stem,
                 frozen_layers=()):
        super().__init__()
        self.deep_stem, self.out_layers, self.frozen_layers = deep_stem, list(out_layers), list(frozen_layers)
        self.active = dict(depth=list(depth), out_channel=list(out_channel), kernel_size=list(kernel_size),
                           expand_ratio=list(expand_ratio))
        if deep_stem:
            mid = make_divisible(out_channel[0] * expand_ratio[0])
            self.first_conv = nn.Module()
            self.first_conv.point_conv1 = conv_norm_act(3, mid, kernel_size[0], norm_layer, 2)
            self.first_conv.normal_conv = conv_norm_act(mid, mid, kernel_size[0], norm_layer)
            self.first_conv.point_conv2 = conv_norm_act(mid, out_channel[0], kernel_size[0], norm_layer)
        else:
            self.first_conv = conv_norm_act(3, out_channel[0], kernel_size[0], norm_layer, 2)
        self.max_pool = nn.MaxPool2d(2, 2, ceil_mode=True)
        blocks, self.stage_starts, cin = [], [], out_channel[0]
        for stage in range(1, len(depth)):
            self.stage_starts.append(len(blocks))
            for i in range(depth[stage]):
                blocks.append(ElasticBlock(cin, out_channel[stage], kernel_size[stage], expand_ratio[stage],
                                           (1 if stage == 1 else 2) if i == 0 else 1, norm_layer, i == 0))
                cin = out_channel[stage]
        self.blocks = nn.ModuleList(blocks)
        self.out_planes = [out_channel[i] for i in self.out_layers]  # the largest; the active ones vary
        self._freeze()

    def zero_last_gamma(self):
        """UP's supernet init: blocks without a shortcut conv start as the identity."""
        for block in self.blocks:
            if block.shortcut is None:
                nn.init.zeros_(block.normal_conv2.bn.weight)

    def _stage_modules(self, stage):
        if stage == 0:
            return [self.first_conv]
        end = self.stage_starts[stage] if stage < len(self.stage_starts) else len(self.blocks)
        return list(self.blocks[self.stage_starts[stage - 1]:end])

    def _freeze(self):
        for stage in self.frozen_layers:
            for module in self._stage_modules(stage):
                module.eval()
                module.requires_grad_(False)

    def train(self, mode=True):
        super().train(mode)
        self._freeze()
        return self

    def forward(self, x):
        a = self.active
        out0, k0 = a["out_channel"][0], a["kernel_size"][0]
        if self.deep_stem:
            mid = make_divisible(round(out0 * a["expand_ratio"][0]))
            stem = self.first_conv
            x = _cna(_cna(_cna(x, stem.point_conv1, mid, k0), stem.normal_conv, mid, k0), stem.point_conv2, out0, k0)
        else:
            x = _cna(x, self.first_conv, out0, k0)
        outs = [x]
        x = self.max_pool(x)
        for stage, start in enumerate(self.stage_starts, 1):
            for i in range(a["depth"][stage]):
                x = self.blocks[start + i](x, a["out_channel"][stage], a["kernel_size"][stage],
                                           a["expand_ratio"][stage])
            outs.append(x)
        return [outs[i] for i in self.out_layers]


class ElasticFPN(BigNASFPN):
    """UP's big_fpn: laterals (``kernel_size[0]``), outputs and extra levels (``kernel_size[1]``)
    of the active widths ``out_channel`` = [lateral, output]."""

    def __init__(self, inplanes, out_channel, kernel_size, num_level, start_level, downsample, norm_layer,
                 use_p5=False):
        n = len(inplanes)
        kernels = [kernel_size[0]] * n + [kernel_size[1]] * num_level
        super().__init__(inplanes, out_channel[0], out_channel[1], kernels, num_level, start_level, downsample,
                         norm_layer, use_p5)
        self.active = dict(depth=[n, num_level], out_channel=list(out_channel), kernel_size=list(kernel_size))

    def forward(self, feats):
        inter, out = self.active["out_channel"]
        k_lat, k_out = self.active["kernel_size"]

        def block(x, seq, width, kernel):
            x = conv(x, seq.conv, width, kernel)
            return norm(x, seq[1]) if len(seq) > 1 else x  # (conv, bn) or a conv with a bias

        first = self.start_level
        laterals = [block(x, getattr(self, f"c{i + first}_lateral"), inter, k_lat) for i, x in enumerate(feats)]
        for i in range(self.n_in - 2, -1, -1):
            laterals[i] = laterals[i] + F.interpolate(laterals[i + 1], size=laterals[i].shape[-2:], mode="nearest")
        outs = [block(x, getattr(self, f"p{i + first}_conv"), out, k_out) for i, x in enumerate(laterals)]
        x = outs[-1] if self.downsample == "pool" or self.use_p5 else laterals[-1]
        for i in range(self.n_in, self.num_level):
            layer = getattr(self, f"p{i + first}_{self.downsample}")
            x = layer(x) if self.downsample == "pool" else block(x, layer, out, k_out)
            outs.append(x)
        return outs


class ElasticRetinaHead(nn.Module):
    """UP's BigRetinaHeadWithBN: class and box towers (convs shared by the levels, a norm per
    level) of the active ``depth`` / ``out_channel`` / ``kernel_size`` each."""

    def __init__(self, cin, num_classes, num_anchors, levels, depth, width, kernel, norm_layer, prior=0.01):
        super().__init__()
        head = BigNASRetinaHead(cin, num_classes, num_anchors, levels, kernel, (width, depth), (width, depth),
                                norm_layer, prior)
        self.num_classes, self.num_anchors, self.num_levels, self.iou_branch = num_classes, num_anchors, levels, False
        self.cls_subnet, self.box_subnet = head.cls_subnet, head.box_subnet
        self.cls_subnet_pred = nn.Sequential(OrderedDict(conv=head.cls_subnet_pred))
        self.box_subnet_pred = nn.Sequential(OrderedDict(conv=head.box_subnet_pred))
        tower = dict(depth=[depth], out_channel=[width], kernel_size=[kernel])
        self.active = {"cls_subnet": dict(tower), "box_subnet": dict(tower)}

    def init_prior(self, prior):
        nn.init.constant_(self.cls_subnet_pred.conv.bias, -math.log((1 - prior) / prior))

    def _tower(self, x, tower, level, setting):
        width, kernel = setting["out_channel"][0], setting["kernel_size"][0]
        for i in range(setting["depth"][0]):
            layer = tower.mlvl_heads[level][i]
            x = F.relu(norm(conv(x, layer[0].conv, width, kernel), layer[1]))
        return x

    def forward(self, features):
        out = []
        for level, x in enumerate(features):
            c = self._tower(x, self.cls_subnet, level, self.active["cls_subnet"])
            b = self._tower(x, self.box_subnet, level, self.active["box_subnet"])
            out.append((conv(c, self.cls_subnet_pred.conv), conv(b, self.box_subnet_pred.conv)))
        return out
