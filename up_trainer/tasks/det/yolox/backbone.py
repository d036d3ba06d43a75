"""CSPDarknet, YOLOX's backbone: a Focus stem and four stages (stride 4, 8, 16, 32), each a
stride-2 conv and a CSP layer, the last with SPP pooling. ``depth`` scales the bottleneck
counts and ``width`` the channels (YOLOX-s: 0.33, 0.50)."""
from torch import nn

from ....errors import ConfigError
from .layers import CSPLayer, Focus, SPPBottleneck, check_act, conv_kind

STAGES = ("stem", "dark2", "dark3", "dark4", "dark5")


class CSPDarknet(nn.Module):
    """forward(x NxCxHxW) -> the list of the ``out_layers`` stage outputs (default dark3-5,
    strides 8, 16, 32). ``out_channels`` lists their channel counts."""

    def __init__(self, depth=1.0, width=1.0, out_layers=(2, 3, 4), depthwise=False, act="silu",
                 in_channels=3):
        super().__init__()
        act = check_act(act)
        if not out_layers or any(not 0 <= i < len(STAGES) for i in out_layers):
            raise ConfigError("out_layers", f"stage indices are 0..4 (stem, dark2..dark5), got {list(out_layers)}")
        Conv = conv_kind(depthwise)
        ch = int(width * 64)
        n = max(round(depth * 3), 1)
        self.stem = Focus(in_channels, ch, 3, act=act)
        self.dark2 = nn.Sequential(Conv(ch, ch * 2, 3, 2, act=act),
                                   CSPLayer(ch * 2, ch * 2, n, depthwise=depthwise, act=act))
        self.dark3 = nn.Sequential(Conv(ch * 2, ch * 4, 3, 2, act=act),
                                   CSPLayer(ch * 4, ch * 4, n * 3, depthwise=depthwise, act=act))
        self.dark4 = nn.Sequential(Conv(ch * 4, ch * 8, 3, 2, act=act),
                                   CSPLayer(ch * 8, ch * 8, n * 3, depthwise=depthwise, act=act))
        self.dark5 = nn.Sequential(Conv(ch * 8, ch * 16, 3, 2, act=act),
                                   SPPBottleneck(ch * 16, ch * 16, act=act),
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
