"""UP's ``mobilenetv3`` backbone (large / small), built in UP's block order.

torchvision's MobileNetV3 cannot stand in: UP's inverted residual puts the squeeze-excite
between the depthwise conv's norm and its activation (torchvision: after the activation), its
squeeze-excite is two bias-free linear layers at channels / 4 (torchvision: 1x1 convs with
biases, squeeze width rounded to 8), and its trunk ends in a 1x1 conv to 1280 channels with a
bias after the global pool, for the small model too (torchvision: a linear layer, 1024 for
small). The layer settings (kernel, expansion, output, SE, activation, stride) are the
paper's, which both share. Module names follow UP's (``features.{i}.conv.{j}``), so UP-trained
weights load as they are. Only the stride-32 output (classification) is mapped.
"""
from torch import nn
from torchvision.models._utils import _make_divisible

from .layers import initialize, norm_layer, read_initializer

# kernel, expansion, output channels, squeeze-excite, activation (RE: ReLU, HS: hard swish), stride
LARGE = [(3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
         (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
         (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
         (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
         (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1)]
SMALL = [(3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
         (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
         (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
         (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1)]
LAST_CONV = {"large": 960, "small": 576}
LAST_CHANNEL = 1280


def _act(kind):
    return nn.ReLU(inplace=True) if kind == "RE" else nn.Hardswish(inplace=True)


class SqueezeExcite(nn.Module):
    """Global average, linear to channels / 4, ReLU, linear back, hard sigmoid; scales x."""

    def __init__(self, channels, reduction=4):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(channels, channels // reduction, bias=False), nn.ReLU(inplace=True),
                                nn.Linear(channels // reduction, channels, bias=False), nn.Hardsigmoid())

    def forward(self, x):
        return x * self.fc(x.mean((2, 3)))[:, :, None, None]


class InvertedResidual(nn.Module):
    """[1x1 expand, norm, act], depthwise kxk, norm, SE, act, 1x1 project, norm; a residual add
    when the shape is kept."""

    def __init__(self, inp, out, kernel, stride, exp, se, act, norm):
        super().__init__()
        self.use_res = stride == 1 and inp == out
        layers = [nn.Conv2d(inp, exp, 1, bias=False), norm(exp), _act(act)] if inp != exp else []
        layers += [nn.Conv2d(exp, exp, kernel, stride, (kernel - 1) // 2, groups=exp, bias=False), norm(exp),
                   SqueezeExcite(exp) if se else nn.Identity(), _act(act),
                   nn.Conv2d(exp, out, 1, bias=False), norm(out)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV3Trunk(nn.Module):
    def __init__(self, mode, width_mult, round_nearest, norm):
        super().__init__()
        inp = 16
        layers = [nn.Sequential(nn.Conv2d(3, inp, 3, 2, 1, bias=False), norm(inp), nn.Hardswish(inplace=True))]
        for kernel, exp, out, se, act, stride in LARGE if mode == "large" else SMALL:
            out_c = _make_divisible(out * width_mult, round_nearest)
            layers.append(InvertedResidual(inp, out_c, kernel, stride, _make_divisible(exp * width_mult, round_nearest),
                                           se, act, norm))
            inp = out_c
        last_conv = _make_divisible(LAST_CONV[mode] * width_mult, round_nearest)
        # UP widens the last layer only for width_mult > 1
        last = _make_divisible(LAST_CHANNEL * width_mult, round_nearest) if width_mult > 1.0 else LAST_CHANNEL
        layers += [nn.Sequential(nn.Conv2d(inp, last_conv, 1, bias=False), norm(last_conv), nn.Hardswish(inplace=True)),
                   nn.AdaptiveAvgPool2d(1), nn.Conv2d(last_conv, last, 1), nn.Hardswish(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.out_layers, self.out_planes, self.out_strides = [0], [last], [32]

    def forward(self, x):
        return [self.features(x)]


def _init_like_up(trunk):
    """UP's default init (no ``initializer``): convs kaiming normal (fan out), biases 0, norms
    (1, 0), the SE linears normal(0.001)."""
    for m in trunk.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight), nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.001)


def build_mobilenetv3(opts):
    norm, sync = norm_layer(opts, default="freeze_bn")
    opts.take("out_strides", types=list, only=[32], why="only the stride-32 output (classification) is mapped")
    opts.take("c4_output", False, only=False, why="only the stride-32 output (classification) is mapped")
    width = opts.take("width_mult", 1.0, types=float, check=lambda v: None if v > 0 else "must be > 0")
    round_nearest = opts.take("round_nearest", 8, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    mode = opts.take("mode", "small", types=str, check=lambda v: None if v in LAST_CONV else "expected large or small")
    opts.ignore("dropout", "UP's mobilenetv3 takes it and never applies it (the head's dropout applies)")
    init = read_initializer(opts)
    opts.done()
    trunk = MobileNetV3Trunk(mode, width, round_nearest, norm)
    if init is None:
        _init_like_up(trunk)
    else:
        initialize(trunk, init)
    return trunk, sync
