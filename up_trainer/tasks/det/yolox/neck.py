"""YOLOX's path-aggregation FPN: top-down (nearest upsampling, concatenation, CSP layers)
then bottom-up (stride-2 convs, concatenation, CSP layers) over three levels; each output
level has the channel count of the backbone level it came from."""
import torch
import torch.nn.functional as F
from torch import nn

from ....errors import ConfigError
from .layers import ConvBnAct, CSPLayer, check_act, conv_kind


class YoloxPAFPN(nn.Module):
    """forward([c3, c4, c5]) -> [p3, p4, p5] with channels ``in_channels``.

    ``shortcut``: residual adds inside the CSP layers (YOLOX's reference code has none in the
    neck, UP's has them; the weights are the same either way)."""

    def __init__(self, in_channels=(256, 512, 1024), depth=1.0, depthwise=False, act="silu", shortcut=False):
        super().__init__()
        act = check_act(act)
        if len(in_channels) != 3:
            raise ConfigError("in_channels", f"YoloxPAFPN takes three levels, got {list(in_channels)}")
        c3, c4, c5 = (int(c) for c in in_channels)
        n = round(3 * depth)
        Conv = conv_kind(depthwise)
        csp = dict(n=n, shortcut=shortcut, depthwise=depthwise, act=act)
        self.lateral_conv0 = ConvBnAct(c5, c4, 1, act=act)
        self.C3_p4 = CSPLayer(2 * c4, c4, **csp)
        self.reduce_conv1 = ConvBnAct(c4, c3, 1, act=act)
        self.C3_p3 = CSPLayer(2 * c3, c3, **csp)
        self.bu_conv2 = Conv(c3, c3, 3, 2, act=act)
        self.C3_n3 = CSPLayer(2 * c3, c4, **csp)
        self.bu_conv1 = Conv(c4, c4, 3, 2, act=act)
        self.C3_n4 = CSPLayer(2 * c4, c5, **csp)
        self.out_channels = [c3, c4, c5]

    def forward(self, features):
        x3, x4, x5 = features
        top5 = self.lateral_conv0(x5)
        up4 = self.C3_p4(torch.cat((F.interpolate(top5, size=x4.shape[-2:], mode="nearest"), x4), 1))
        top4 = self.reduce_conv1(up4)
        out3 = self.C3_p3(torch.cat((F.interpolate(top4, size=x3.shape[-2:], mode="nearest"), x3), 1))
        out4 = self.C3_n3(torch.cat((self.bu_conv2(out3), top4), 1))
        out5 = self.C3_n4(torch.cat((self.bu_conv1(out4), top5), 1))
        return [out3, out4, out5]
