"""YOLOX's decoupled head: per level a 1x1 stem, then a classification branch (two 3x3
convs, 1x1 to the class logits) and a regression branch (two 3x3 convs, 1x1 to the four box
outputs and 1x1 to the objectness logit)."""
import math

import torch
from torch import nn

from ....errors import ConfigError
from .layers import ConvBnAct, check_act, conv_kind


class YoloXHead(nn.Module):
    """forward([p3, p4, p5]) -> per level a tuple (cls N x P*C x H x W, reg N x P*4 x H x W,
    obj N x P x H x W), all raw (logits; the box outputs before decoding).

    ``num_point`` (P): predictions per grid point. YOLOX has one; UP's RetinaNet-style files
    put P anchors on each point and read the maps as (classes, box deltas, IoU logit) per anchor.

    ``num_classes`` counts foreground classes only (sigmoid classification). The class and
    objectness biases start at the prior ``-log((1 - p) / p)``, so every point predicts
    probability ``prior_prob`` at first (the paper's 0.01): the loss of the many background
    points does not swamp the first iterations."""

    def __init__(self, num_classes, in_channels=(256, 512, 1024), channels=256, depthwise=False, act="silu",
                 prior_prob=0.01, num_point=1):
        super().__init__()
        act = check_act(act)
        if num_classes < 1:
            raise ConfigError("num_classes", f"must be >= 1 (foreground classes), got {num_classes}")
        if not 0 < prior_prob < 1:
            raise ConfigError("prior_prob", f"must be in (0, 1), got {prior_prob}")
        if not isinstance(num_point, int) or num_point < 1:
            raise ConfigError("num_point", f"must be an integer >= 1, got {num_point!r}")
        self.num_classes, self.num_point = num_classes, num_point
        Conv = conv_kind(depthwise)
        self.stems, self.cls_convs, self.reg_convs = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        self.cls_preds, self.reg_preds, self.obj_preds = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for cin in in_channels:
            self.stems.append(ConvBnAct(int(cin), channels, 1, act=act))
            self.cls_convs.append(nn.Sequential(Conv(channels, channels, 3, 1, act=act),
                                                Conv(channels, channels, 3, 1, act=act)))
            self.reg_convs.append(nn.Sequential(Conv(channels, channels, 3, 1, act=act),
                                                Conv(channels, channels, 3, 1, act=act)))
            self.cls_preds.append(nn.Conv2d(channels, num_point * num_classes, 1))
            self.reg_preds.append(nn.Conv2d(channels, num_point * 4, 1))
            self.obj_preds.append(nn.Conv2d(channels, num_point, 1))
        self.init_prior(prior_prob)

    def init_prior(self, prior_prob):
        bias = -math.log((1 - prior_prob) / prior_prob)
        with torch.no_grad():
            for conv in list(self.cls_preds) + list(self.obj_preds):
                conv.bias.fill_(bias)

    def forward(self, features):
        out = []
        for i, x in enumerate(features):
            x = self.stems[i](x)
            cls_feat, reg_feat = self.cls_convs[i](x), self.reg_convs[i](x)
            out.append((self.cls_preds[i](cls_feat), self.reg_preds[i](reg_feat), self.obj_preds[i](reg_feat)))
        return out
