"""The building blocks of CSPDarknet and the YOLOX neck and head: conv-BN-activation,
its depthwise-separable form, the Focus stem, bottlenecks, CSP layers and SPP pooling."""
import torch
from torch import nn

from ....errors import ConfigError

ACTIVATIONS = {
    "silu": lambda: nn.SiLU(inplace=True),
    "relu": lambda: nn.ReLU(inplace=True),
    "lrelu": lambda: nn.LeakyReLU(0.1, inplace=True),
    "leakyrelu": lambda: nn.LeakyReLU(0.1, inplace=True),
    "hardswish": lambda: nn.Hardswish(inplace=True),
}
# YOLOX trains its BatchNorms with these (UP's special_bn_init sets the same).
BN_EPS, BN_MOMENTUM = 1e-3, 0.03


class WarmStartBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose running statistics are the plain average of the batches seen while
    that gives a batch more weight than ``momentum`` (the first 1 / momentum batches: 33 at
    YOLOX's 0.03), an exponential average with ``momentum`` after that. Batch statistics and
    the statistics of long runs are unchanged.

    Why: with momentum 0.03 a plain BatchNorm keeps 0.97 ** n of its initial statistics (mean
    0, variance 1) after n batches: 31 % after 38 batches, one epoch of 300 images at batch 8.
    YOLOX's 0-255 input puts the stem's true mean in the thousands, so that share is many
    standard deviations off, the error compounds through the network and the evaluated model
    outputs garbage (measured: validation loss_obj 1.9e6 after one such epoch; 4.7 with the
    statistics re-estimated from the same weights). YOLOX's 300 COCO epochs never see this;
    a few hundred images do, every epoch until about the fourth."""

    _seen = None  # batches averaged so far; read from num_batches_tracked once, then counted here

    def forward(self, x):
        if not (self.training and self.track_running_stats and self.momentum):
            return super().forward(x)
        if self._seen is None:
            self._seen = int(self.num_batches_tracked)
        self._seen += 1
        momentum = self.momentum
        self.momentum = max(momentum, 1.0 / self._seen)
        try:
            return super().forward(x)
        finally:
            self.momentum = momentum

    def _load_from_state_dict(self, *args, **kwargs):
        self._seen = None  # a loaded num_batches_tracked is read again at the next batch
        return super()._load_from_state_dict(*args, **kwargs)


def check_act(act, path="act"):
    """The activation's canonical name; accepts UP's spellings (``Silu``, ``ReLU``, ``LeakyReLU``)."""
    key = str(act).lower().replace("_", "")
    if key not in ACTIVATIONS:
        raise ConfigError(path, f"{act!r} is not one of silu, relu, lrelu, hardswish")
    return key


class ConvBnAct(nn.Module):
    """k x k convolution (no bias), BatchNorm, activation."""

    def __init__(self, cin, cout, kernel_size, stride=1, groups=1, act="silu"):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False)
        self.bn = WarmStartBatchNorm2d(cout, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act = ACTIVATIONS[check_act(act)]()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class DWConv(nn.Module):
    """Depthwise k x k then pointwise 1x1 (YOLOX-nano's convolutions)."""

    def __init__(self, cin, cout, kernel_size, stride=1, act="silu"):
        super().__init__()
        self.dconv = ConvBnAct(cin, cin, kernel_size, stride, groups=cin, act=act)
        self.pconv = ConvBnAct(cin, cout, 1, 1, act=act)

    def forward(self, x):
        return self.pconv(self.dconv(x))


def conv_kind(depthwise):
    """The 3x3 convolution of a block: depthwise-separable or plain."""
    return DWConv if depthwise else ConvBnAct


class Focus(nn.Module):
    """Space to depth (each 2x2 pixel block to 4 channels, halving H and W), then a conv."""

    def __init__(self, cin, cout, kernel_size=3, act="silu"):
        super().__init__()
        self.conv = ConvBnAct(cin * 4, cout, kernel_size, 1, act=act)

    def forward(self, x):
        tl, bl = x[..., ::2, ::2], x[..., 1::2, ::2]
        tr, br = x[..., ::2, 1::2], x[..., 1::2, 1::2]
        return self.conv(torch.cat((tl, bl, tr, br), dim=1))


class Bottleneck(nn.Module):
    def __init__(self, cin, cout, shortcut=True, expansion=0.5, depthwise=False, act="silu"):
        super().__init__()
        hidden = int(cout * expansion)
        self.conv1 = ConvBnAct(cin, hidden, 1, act=act)
        self.conv2 = conv_kind(depthwise)(hidden, cout, 3, 1, act=act)
        self.use_add = shortcut and cin == cout

    def forward(self, x):
        y = self.conv2(self.conv1(x))
        return y + x if self.use_add else y


class CSPLayer(nn.Module):
    """Cross-stage partial block: one 1x1 branch through ``n`` bottlenecks, one 1x1 branch
    straight through, concatenated and fused by a 1x1."""

    def __init__(self, cin, cout, n=1, shortcut=True, expansion=0.5, depthwise=False, act="silu"):
        super().__init__()
        hidden = int(cout * expansion)
        self.conv1 = ConvBnAct(cin, hidden, 1, act=act)
        self.conv2 = ConvBnAct(cin, hidden, 1, act=act)
        self.conv3 = ConvBnAct(2 * hidden, cout, 1, act=act)
        self.m = nn.Sequential(*[Bottleneck(hidden, hidden, shortcut, 1.0, depthwise, act) for _ in range(n)])

    def forward(self, x):
        return self.conv3(torch.cat((self.m(self.conv1(x)), self.conv2(x)), dim=1))


class SPPBottleneck(nn.Module):
    """Spatial pyramid pooling: max pools of several sizes (stride 1) side by side."""

    def __init__(self, cin, cout, kernel_sizes=(5, 9, 13), act="silu"):
        super().__init__()
        hidden = cin // 2
        self.conv1 = ConvBnAct(cin, hidden, 1, act=act)
        self.m = nn.ModuleList([nn.MaxPool2d(k, 1, k // 2) for k in kernel_sizes])
        self.conv2 = ConvBnAct(hidden * (len(kernel_sizes) + 1), cout, 1, act=act)

    def forward(self, x):
        x = self.conv1(x)
        return self.conv2(torch.cat([x] + [pool(x) for pool in self.m], dim=1))
