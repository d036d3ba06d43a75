"""CSPDarknet, YOLOX's backbone: a Focus stem and four stages (stride 4, 8, 16, 32), each a
stride-2 conv and a CSP layer, the last with SPP pooling. ``depth`` scales the bottleneck
counts and ``width`` the channels (YOLOX-s: 0.33, 0.50).

UP's FPGA variant (``yolox_fpga.yaml``) swaps two parts for ones without space-to-depth and
large max pools: ``stem="stem_focus"`` (three 3x3 convs, the first at stride 2) and
``spp="dilated"`` (:class:`DilatedSPP`)."""
import torch
from torch import nn

from ....errors import ConfigError
from .layers import BN_EPS, BN_MOMENTUM, ConvBnAct, CSPLayer, Focus, SPPBottleneck, check_act, conv_kind

STAGES = ("stem", "dark2", "dark3", "dark4", "dark5")
STEMS = ("focus", "stem_focus")
SPPS = ("pool", "dilated")


def stem_focus(cin, cout, act):
    """UP's ``stem_focus``: 3x3 stride-2 conv to cout / 2, 3x3 conv, 3x3 conv to cout."""
    return nn.Sequential(ConvBnAct(cin, cout // 2, 3, 2, act=act), ConvBnAct(cout // 2, cout // 2, 3, act=act),
                         ConvBnAct(cout // 2, cout, 3, act=act))


class DilatedSPP(nn.Module):
    """UP's ``SPP_dila`` (``use_spp_pool: false``): the SPP block with 3x3 conv-BN-ReLU of
    dilation 1, 3, 5 in place of the 5, 9, 13 max pools (ReLU whatever the net's activation,
    as in UP)."""

    def __init__(self, cin, cout, dilations=(1, 3, 5), act="silu"):
        super().__init__()
        hidden = cin // 2
        self.conv1 = ConvBnAct(cin, hidden, 1, act=act)
        self.pooling_blocks = nn.ModuleList()
        for d in dilations:
            block = nn.Sequential()
            block.add_module("conv", nn.Conv2d(hidden, hidden, 3, 1, d, dilation=d, bias=False))
            block.add_module("bn", nn.BatchNorm2d(hidden, eps=BN_EPS, momentum=BN_MOMENTUM))
            block.add_module("relu", nn.ReLU(inplace=True))
            self.pooling_blocks.append(block)
        self.conv2 = ConvBnAct(hidden * (len(dilations) + 1), cout, 1, act=act)

    def forward(self, x):
        x = self.conv1(x)
        return self.conv2(torch.cat([x] + [block(x) for block in self.pooling_blocks], 1))


class CSPDarknet(nn.Module):
    """forward(x NxCxHxW) -> the list of the ``out_layers`` stage outputs (default dark3-5,
    strides 8, 16, 32). ``out_channels`` lists their channel counts."""

    def __init__(self, depth=1.0, width=1.0, out_layers=(2, 3, 4), depthwise=False, act="silu",
                 in_channels=3, stem="focus", spp="pool"):
        super().__init__()
        act = check_act(act)
        if not out_layers or any(not 0 <= i < len(STAGES) for i in out_layers):
            raise ConfigError("out_layers", f"stage indices are 0..4 (stem, dark2..dark5), got {list(out_layers)}")
        for key, value, kinds in (("stem", stem, STEMS), ("spp", spp, SPPS)):
            if value not in kinds:
                raise ConfigError(key, f"{value!r} is not one of {', '.join(kinds)}")
        Conv = conv_kind(depthwise)
        ch = int(width * 64)
        n = max(round(depth * 3), 1)
        self.stem = Focus(in_channels, ch, 3, act=act) if stem == "focus" else stem_focus(in_channels, ch, act)
        self.dark2 = nn.Sequential(Conv(ch, ch * 2, 3, 2, act=act),
                                   CSPLayer(ch * 2, ch * 2, n, depthwise=depthwise, act=act))
        self.dark3 = nn.Sequential(Conv(ch * 2, ch * 4, 3, 2, act=act),
                                   CSPLayer(ch * 4, ch * 4, n * 3, depthwise=depthwise, act=act))
        self.dark4 = nn.Sequential(Conv(ch * 4, ch * 8, 3, 2, act=act),
                                   CSPLayer(ch * 8, ch * 8, n * 3, depthwise=depthwise, act=act))
        self.dark5 = nn.Sequential(Conv(ch * 8, ch * 16, 3, 2, act=act),
                                   SPPBottleneck(ch * 16, ch * 16, act=act) if spp == "pool" else
                                   DilatedSPP(ch * 16, ch * 16, act=act),
                                   CSPLayer(ch * 16, ch * 16, n, shortcut=False, depthwise=depthwise, act=act))
        self.out_layers = list(out_layers)
        self.out_channels = [ch * (1, 2, 4, 8, 16)[i] for i in self.out_layers]
        self.out_strides = [(2, 4, 8, 16, 32)[i] for i in self.out_layers]

    def forward(self, x):
        outs = []
        for name in STAGES:
            x = getattr(self, name)(x)
            outs.append(x)
        return [outs[i] for i in self.out_layers]
