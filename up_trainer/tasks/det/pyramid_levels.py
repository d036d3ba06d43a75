"""Anchors and pyramid levels on UP's rules, shared by the detectors that follow them (the
native ATSS RetinaNet and the nets read from UP's files): one level's ``hand_craft`` anchors, and
the levels stacked above the backbone's."""
import math

import torch
from torch import nn
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.ops.feature_pyramid_network import ExtraFPNBlock


def cell_anchors(stride, ratios, scales):
    """UP's ``hand_craft`` anchors of one level (its default, non-aligned rule): a
    stride x stride window [0, stride - 1], reshaped per ratio with widths rounded, then scaled;
    ratios outer, scales inner (torchvision's order too)."""
    ctr = (stride - 1) / 2
    out = []
    for r in ratios:
        w = round(math.sqrt(stride * stride / r))
        h = round(w * r)
        for s in scales:
            ws, hs = w * s, h * s
            out.append([ctr - 0.5 * (ws - 1), ctr - 0.5 * (hs - 1), ctr + 0.5 * (ws - 1), ctr + 0.5 * (hs - 1)])
    return torch.tensor(out, dtype=torch.float32)


class ExtraLevels(ExtraFPNBlock):
    """UP's levels above the backbone's: ``pool`` takes P5 through 1x1 max-pools of stride 2;
    ``conv`` takes 3x3 stride-2 convs (no activation between them) from C5's lateral output,
    or from P5 with ``use_p5``."""

    def __init__(self, count, mode, channels, use_p5=False):
        super().__init__()
        self.mode, self.use_p5, self.count = mode, use_p5, count
        if mode == "conv":
            self.convs = nn.ModuleList(nn.Conv2d(channels, channels, 3, 2, 1) for _ in range(count))
        else:  # modules, not F.max_pool2d, so a level has a path (UP's p6_pool) for distillation
            self.pools = nn.ModuleList(nn.MaxPool2d(1, 2, 0) for _ in range(count))
        self._fpn = []

    def attach(self, fpn):
        self._fpn = [fpn]  # a list: the FPN owns this block, no module cycle

    def forward(self, results, x, names):
        if self.mode == "pool":
            src = results[-1]
        else:
            src = results[-1] if self.use_p5 else self._fpn[0].get_result_from_inner_blocks(x[-1], -1)
        level = len(results)
        for i in range(self.count):
            src = self.pools[i](src) if self.mode == "pool" else self.convs[i](src)
            results.append(src)
            names.append(f"p{level + i}")
        return results, names


def fpn_trunk(backbone, returned_layers, fpn_channels, extra_levels, trainable_layers, frozen_bn):
    """(body, fpn, channels, strides) of a native detector on UP's pyramid: a torchvision
    backbone's stages, an FPN over them and ``extra_levels`` stride-2 convs above (UP's
    ``downsample: conv``), the strides measured."""
    from .models import _feature_strides, build_fpn_backbone
    from ...errors import ConfigError

    if not isinstance(extra_levels, int) or isinstance(extra_levels, bool) or not 0 <= extra_levels <= 4:
        raise ConfigError("extra_levels", f"must be an integer in [0, 4], got {extra_levels!r}")
    body, fpn, channels = build_fpn_backbone(backbone, returned_layers, fpn_channels, "none", trainable_layers,
                                             frozen_bn)
    if extra_levels:
        extra = ExtraLevels(extra_levels, "conv", channels)
        fpn.extra_blocks = extra
        extra.attach(fpn)
    return body, fpn, channels, _feature_strides(body, fpn)


class UPAnchorGenerator(AnchorGenerator):
    """torchvision's generator with UP's cell anchors, spread at UP's nominal strides (not the
    padded-image / feature-map ratio torchvision measures)."""

    def __init__(self, strides, ratios, scales):
        super().__init__(sizes=tuple(tuple(scales) for _ in strides),
                         aspect_ratios=tuple(tuple(ratios) for _ in strides))
        self.up_strides = list(strides)
        with torch.device("cpu"):
            self.cell_anchors = [cell_anchors(s, ratios, scales) for s in strides]

    def grid_anchors(self, grid_sizes, strides):
        device = self.cell_anchors[0].device
        nominal = [[torch.tensor(s, device=device), torch.tensor(s, device=device)] for s in self.up_strides]
        return super().grid_anchors(grid_sizes, nominal)
