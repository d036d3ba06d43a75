"""YOLOv5's blocks as UP builds them (UP's yolov5 plugin components), with UP's module names
(``conv``, ``bn1``, ``conv_block1``, ``cbh_blocks``, ...) so UP-trained weights load as they
are. ``act()`` builds the activation (UP's ``act_fn``); BatchNorms start at torch's eps and
momentum (UP's ``yolov5_init`` initializer sets 1e-3 / 0.03: :func:`yolov5_init`)."""
import torch
from torch import nn


class ConvBnAct(nn.Module):
    """k x k conv (no bias, ``k // 2`` padding), ``bn1``, activation."""

    def __init__(self, cin, cout, kernel_size=1, stride=1, act=nn.Hardswish):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size, stride, kernel_size // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.act = act()

    def forward(self, x):
        return self.act(self.bn1(self.conv(x)))


class Focus(nn.Module):
    """Space to depth in UP's order (channel blocks: top-left, top-right, bottom-left,
    bottom-right pixel of each 2x2), then ``conv_block``."""

    def __init__(self, cin, cout, kernel_size=3, act=nn.Hardswish):
        super().__init__()
        self.conv_block = ConvBnAct(cin * 4, cout, kernel_size, 1, act=act)

    def forward(self, x):
        n, c, h, w = x.shape
        blocks = x.view(n, c, h // 2, 2, w // 2, 2).permute(0, 3, 5, 1, 2, 4).reshape(n, 4 * c, h // 2, w // 2)
        return self.conv_block(blocks)


class Bottleneck(nn.Module):
    """1x1 then 3x3 ConvBnAct, plus the input when ``shortcut`` and the channels match."""

    def __init__(self, cin, cout, shortcut=True, act=nn.Hardswish, expansion=0.5):
        super().__init__()
        hidden = int(cout * expansion)
        self.shortcut = shortcut and cin == cout
        self.conv_block1 = ConvBnAct(cin, hidden, 1, 1, act=act)
        self.conv_block2 = ConvBnAct(hidden, cout, 3, 1, act=act)

    def forward(self, x):
        y = self.conv_block2(self.conv_block1(x))
        return x + y if self.shortcut else y


class BottleneckCSP(nn.Module):
    """YOLOv5's BottleneckCSP: ``conv_block1`` -> ``nums`` bottlenecks -> 1x1 ``conv3`` beside a
    plain 1x1 ``conv2`` of the input; the two concatenated through ``bn1`` and the activation,
    then ``conv_block4``."""

    def __init__(self, cin, cout, nums=1, shortcut=True, act=nn.Hardswish, expansion=0.5):
        super().__init__()
        hidden = int(cout * expansion)
        self.conv_block1 = ConvBnAct(cin, hidden, 1, 1, act=act)
        self.conv2 = nn.Conv2d(cin, hidden, 1, 1, bias=False)
        self.conv3 = nn.Conv2d(hidden, hidden, 1, 1, bias=False)
        self.conv_block4 = ConvBnAct(2 * hidden, cout, 1, 1, act=act)
        self.bn1 = nn.BatchNorm2d(2 * hidden)
        self.act = act()
        self.cbh_blocks = nn.Sequential(*[Bottleneck(hidden, hidden, shortcut, act, 1.0) for _ in range(nums)])

    def forward(self, x):
        inner = self.conv3(self.cbh_blocks(self.conv_block1(x)))
        return self.conv_block4(self.act(self.bn1(torch.cat((inner, self.conv2(x)), 1))))


class SPP(nn.Module):
    """``conv_block1`` to half the channels, the map beside its 5, 9, 13 max pools, ``conv_block2``."""

    def __init__(self, cin, cout, kernels=(5, 9, 13), act=nn.Hardswish):
        super().__init__()
        hidden = cin // 2
        self.conv_block1 = ConvBnAct(cin, hidden, 1, 1, act=act)
        self.conv_block2 = ConvBnAct(hidden * (len(kernels) + 1), cout, 1, 1, act=act)
        self.pooling_blocks = nn.ModuleList([nn.MaxPool2d(k, 1, k // 2) for k in kernels])

    def forward(self, x):
        y = self.conv_block1(x)
        pooled = [pool(y) for pool in self.pooling_blocks]
        return self.conv_block2(torch.cat([y] + pooled, 1))


class Concat(nn.Module):
    """A parameter-free slot of UP's neck streams (kept so the module indices are UP's)."""

    def forward(self, tensors):
        return torch.cat(tensors, 1)


def yolov5_init(module):
    """UP's ``yolov5_init``: every BatchNorm2d to eps 1e-3, momentum 0.03 (convs keep torch's init)."""
    for m in module.modules():
        if type(m) is nn.BatchNorm2d:
            m.eps, m.momentum = 1e-3, 0.03
