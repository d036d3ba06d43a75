"""UP backbones as torchvision trunks: resnet18/34/50/101/152, mobilenetv2, regnetx/y_200m/400m
and UP's swin types.

A trunk takes an image batch and returns the list of feature maps UP's ``out_layers`` (or
``out_strides``) select; it keeps torchvision's module names, so torchvision ImageNet weights
load as they are and UP-named weights load through :mod:`.keymap`. ``frozen_layers`` (UP's
stage indices, 0 = stem) freeze those stages: no gradients and BatchNorm kept in eval mode.
"""
import math

import torchvision
from torch import nn
from torchvision.ops import stochastic_depth

from ...errors import ConfigError
from .layers import initialize, norm_layer, read_initializer
from .vit import VITS, build_vit

RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
BOTTLENECKS = ("resnet50", "resnet101", "resnet152")
RESNETS_D = tuple(f"{r}_D" for r in RESNETS if r != "resnet152")  # UP has no resnet152_D
REGNETS = {  # UP's RegNet design parameters (identical to torchvision's for the 400MF models)
    "regnetx_200m": dict(depth=13, w_0=24, w_a=36.44, w_m=2.49, group_width=8),
    "regnetx_400m": dict(depth=22, w_0=24, w_a=24.48, w_m=2.54, group_width=16),
    "regnety_200m": dict(depth=13, w_0=24, w_a=36.44, w_m=2.49, group_width=8, se_ratio=0.25),
    "regnety_400m": dict(depth=16, w_0=48, w_a=27.89, w_m=2.09, group_width=8, se_ratio=0.25),
}
SWINS = ("swin_tiny", "swin_small", "swin_base_224", "swin_base_384", "swin_large_224", "swin_large_384")
CONVNEXTS = ("convnext_tiny", "convnext_small")  # on torchvision's ConvNeXt (convnext.py)
CSWINS = ("CSWin_64_12211_tiny_224", "CSWin_64_24322_small_224", "CSWin_96_24322_base_224")  # on torch (cswin.py)
BACKBONES = (RESNETS + RESNETS_D + ("mobilenetv2", "mobilenetv3") + tuple(REGNETS) + SWINS + tuple(VITS) + CONVNEXTS
             + CSWINS)


class Trunk(nn.Module):
    """Stages run in order; the outputs of ``out_layers`` are returned. ``stage_names[i]``
    lists the attributes making UP's stage i."""

    def __init__(self, stages, out_layers, out_planes, out_strides, frozen_layers=()):
        super().__init__()
        self.stage_names = [names for names, _ in stages]
        for names, modules in stages:
            for name, module in zip(names, modules):
                self.add_module(name, module)
        self.out_layers, self.out_planes, self.out_strides = list(out_layers), list(out_planes), list(out_strides)
        self.frozen_layers = list(frozen_layers)
        last = max(self.out_layers)
        for names in self.stage_names[last + 1:]:  # stages after the last output never run
            for name in names:
                delattr(self, name)
        self.stage_names = self.stage_names[:last + 1]
        for i in self.frozen_layers:
            for name in self.stage_names[i] if i < len(self.stage_names) else ():
                getattr(self, name).requires_grad_(False)
        self.train()

    def train(self, mode=True):
        super().train(mode)
        for i in self.frozen_layers:  # UP keeps frozen stages' BatchNorm statistics fixed
            for name in self.stage_names[i] if i < len(self.stage_names) else ():
                getattr(self, name).eval()
        return self

    def forward(self, x):
        outs = []
        for names in self.stage_names:
            for name in names:
                x = getattr(self, name)(x)
            outs.append(x)
        return [outs[i] for i in self.out_layers]


class _DropPath:
    """Stochastic depth on a residual branch, as a forward hook on the branch's last norm
    (the block keeps torchvision's parameter names)."""

    def __init__(self, block, p):
        self.block, self.p = [block], p

    def __call__(self, module, inputs, output):
        return stochastic_depth(output, self.p, "row", self.block[0].training)


def _check_layers(opts, n_stages, default_out):
    def in_range(v):
        bad = [i for i in v if not isinstance(i, int) or not 0 <= i < n_stages]
        return f"stage indices are 0..{n_stages - 1}, got {v}" if bad else None

    frozen = opts.take("frozen_layers", [], types=(list, type(None)), check=in_range) or []
    out_layers = opts.take("out_layers", default_out, types=list, check=in_range)
    return frozen, out_layers


def _check_strides(opts, out_layers, natural, dilatable=False):
    """True when the given ``out_strides`` ask for stage 4 at stride 16 (UP: stage 4 at stride 1,
    dilated 2, as R-FCN uses it); otherwise the strides must be the natural ones."""
    want = [natural[i] for i in out_layers]
    dilated = list(want)
    if dilatable and out_layers and out_layers[-1] == 4:
        dilated[-1] = 16
    given = opts.take("out_strides", want, types=list, check=lambda v: None if v in (want, dilated) else
                      f"{v}: the strides follow from out_layers: {want}"
                      + (f" (or {dilated}: stage 4 dilated)" if dilated != want else ""))
    return given != want


def build_resnet(arch, opts):
    """UP's resnet18..101 and their ``_D`` variants (``resnet50_D``: every shortcut that changes
    shape averages 2x2 windows (after UP's one-pixel zero pad at the top/left) before a
    stride-1 1x1 conv; ``deep_stem`` optional, off by default as in UP)."""
    variant_d = arch.endswith("_D")
    base = arch[:-2] if variant_d else arch
    norm, sync = norm_layer(opts, default="freeze_bn")
    frozen, out_layers = _check_layers(opts, 5, [4])
    dilated = _check_strides(opts, out_layers, [4, 4, 8, 16, 32], dilatable=base in BOTTLENECKS)
    opts.take("style", "pytorch", types=str, only="pytorch", why="caffe-style ResNet weights are not mapped")
    init = read_initializer(opts)
    in_channels = opts.take("input_channel", 3, types=int)
    deep_stem = opts.take("deep_stem", False, types=bool)
    # not a kwarg of UP's ResNet (UP: TypeError), but UP's simsiam_100e.yaml gives it: honoured as
    # torchvision's (each block's last norm starts at zero, so the block starts as its shortcut)
    zero_init_residual = opts.take("zero_init_residual", False, types=bool)
    fixed = [("multiplier", 1), ("checkpoint", False), ("nnie", False), ("fa", None)]
    if variant_d:  # UP's resnet_D takes no drop path, avg_down, down_sample, block_type or width
        drop_path, avg_down = 0.0, False
    else:
        drop_path = opts.take("drop_path_rate", 0.0, types=float)
        avg_down = opts.take("avg_down", False, types=bool)
        fixed += [("down_sample", "pool"), ("pretrained", False), ("block_type", "res"),
                  ("width", [64, 64, 128, 256, 512])]
    for key, only in fixed:
        opts.take(key, only, only=only, why="use the memory_checkpoint hook" if key == "checkpoint" else None)
    opts.take("layer_deform", [0] * 5, types=list, check=lambda v: None if not any(v) else
              "deformable convolutions are not mapped (torchvision has no DCN layers here)")
    opts.done()
    net = torchvision.models.get_model(base, weights=None, norm_layer=norm,
                                       replace_stride_with_dilation=[False, False, dilated])
    if dilated:  # UP dilates stage 4's first block as well (torchvision only the later ones)
        net.layer4[0].conv2.dilation, net.layer4[0].conv2.padding = (2, 2), (2, 2)
    if deep_stem:
        net.conv1 = deep_stem_convs(in_channels, 64, norm)
    elif in_channels != 3:
        net.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
    if variant_d or avg_down:
        for i in range(1, 5):
            first = getattr(net, f"layer{i}")[0]
            if first.downsample is not None:
                first.downsample = pooled_shortcut(first.downsample, first.stride, up_d=variant_d)
    stages = [(("conv1", "bn1", "relu", "maxpool"), (net.conv1, net.bn1, net.relu, net.maxpool))]
    stages += [((f"layer{i}",), (getattr(net, f"layer{i}"),)) for i in range(1, 5)]
    blocks = [b for i in range(1, 5) for b in getattr(net, f"layer{i}")]
    if drop_path > 0:  # UP's rule: rate grows linearly with the block index, 0 for the first
        for i, block in enumerate(blocks):
            if i:
                last_norm = block.bn3 if hasattr(block, "bn3") else block.bn2
                last_norm.register_forward_hook(_DropPath(block, drop_path * i / (len(blocks) - 1)))
    width = 512 * (4 if base in BOTTLENECKS else 1)
    planes = [64, width // 8, width // 4, width // 2, width]
    strides = [[4, 4, 8, 16, 16 if dilated else 32][i] for i in out_layers]
    trunk = Trunk(stages, out_layers, [planes[i] for i in out_layers], strides, frozen)
    initialize(trunk, init)
    if zero_init_residual:
        for block in blocks:
            nn.init.zeros_((block.bn3 if hasattr(block, "bn3") else block.bn2).weight)
    if variant_d and init is None:  # UP's resnet_D zeroes its shortcut norms; an initializer resets them
        for block in blocks:
            shortcut_norm = block.downsample[-1] if block.downsample is not None else None
            if getattr(shortcut_norm, "weight", None) is not None:
                nn.init.zeros_(shortcut_norm.weight)
                nn.init.zeros_(shortcut_norm.bias)
    return trunk, sync


def deep_stem_convs(in_channels, planes, norm):
    """UP's ``deep_stem``: three 3x3 convs (stride 2, 1, 1; half width for the first two) in
    place of the 7x7 conv; the stem's own norm (``bn1``) follows as before."""
    half = planes // 2
    return nn.Sequential(nn.Conv2d(in_channels, half, 3, 2, 1, bias=False), norm(half), nn.ReLU(inplace=True),
                         nn.Conv2d(half, half, 3, 1, 1, bias=False), norm(half), nn.ReLU(inplace=True),
                         nn.Conv2d(half, planes, 3, 1, 1, bias=False))


def pooled_shortcut(downsample, stride, up_d):
    """A strided 1x1-conv shortcut (torchvision's ``downsample``: conv, norm) rebuilt to average
    first and convolve at stride 1. ``up_d`` (UP's ``*_D`` nets): zero-pad one pixel at the top
    and left, then a 2x2 average with the block's stride (the pad's zeros count); otherwise
    (UP's ``avg_down``): a stride x stride average, partial windows over real pixels only."""
    conv, norm = downsample[0], downsample[1]
    conv.stride = (1, 1)
    if up_d:
        return nn.Sequential(nn.ZeroPad2d((1, 0, 1, 0)), nn.AvgPool2d(2, stride=stride), conv, norm)
    return nn.Sequential(nn.AvgPool2d(stride, stride=stride, ceil_mode=True, count_include_pad=False), conv, norm)


def build_mobilenetv2(opts):
    from torchvision.ops.misc import Conv2dNormActivation

    norm, sync = norm_layer(opts, default="freeze_bn")
    opts.take("out_strides", types=list, only=[32], why="only the stride-32 output (classification) is mapped")
    opts.take("c4_output", False, only=False)
    width = opts.take("width_mult", 1.0, types=float, check=lambda v: None if v > 0 else "must be > 0")
    round_nearest = opts.take("round_nearest", 8, types=int)
    init = read_initializer(opts)
    opts.done()
    net = torchvision.models.MobileNetV2(width_mult=width, round_nearest=round_nearest, norm_layer=norm)
    first = net.features[1]  # UP's first block keeps its 1x1 expansion conv even at ratio 1
    inp = net.features[0].out_channels
    first.conv = nn.Sequential(Conv2dNormActivation(inp, inp, 1, norm_layer=norm, activation_layer=nn.ReLU6),
                               *first.conv)
    trunk = _Sequential(net.features, net.last_channel)
    initialize(trunk, init)
    return trunk, sync


class _Sequential(nn.Module):
    """A trunk whose parameters live under one child (torchvision's ``features``)."""

    def __init__(self, features, planes):
        super().__init__()
        self.features = features
        self.out_layers, self.out_planes, self.out_strides = [0], [planes], [32]

    def forward(self, x):
        return [self.features(x)]


def build_regnet(arch, opts):
    from torchvision.models.regnet import BlockParams, RegNet

    norm, sync = norm_layer(opts, default="solo_bn")
    frozen, out_layers = _check_layers(opts, 5, [4])
    _check_strides(opts, out_layers, [2, 4, 8, 16, 32])
    init = read_initializer(opts)
    opts.done()
    net = RegNet(_regnet_params(BlockParams, **REGNETS[arch]), norm_layer=norm)
    stage_blocks = list(net.trunk_output.children())
    stages = [(("stem",), (net.stem,))] + [((f"s{i + 1}",), (b,)) for i, b in enumerate(stage_blocks)]
    planes = [net.stem[0].out_channels] + [b[-1].f.c[0].out_channels for b in stage_blocks]
    trunk = Trunk(stages, out_layers, [planes[i] for i in out_layers], [[2, 4, 8, 16, 32][i] for i in out_layers],
                  frozen)
    initialize(trunk, init)
    return trunk, sync


def _regnet_params(BlockParams, depth, w_0, w_a, w_m, group_width, se_ratio=None, q=8):
    """RegNet's widths from its design parameters, rounded as UP rounds them (Python's
    round-half-even when fitting widths to the group width; torchvision rounds half up, which
    gives RegNetX-400MF a last stage of 400 channels where UP's has 384)."""
    widths, depths = [], []
    for j in range(depth):
        k = round(math.log((j * w_a + w_0) / w_0) / math.log(w_m))
        w = int(round(w_0 * w_m ** k / q) * q)
        if widths and widths[-1] == w:
            depths[-1] += 1
        else:
            widths.append(w), depths.append(1)
    groups = [min(group_width, w) for w in widths]
    widths = [int(round(w / g) * g) for w, g in zip(widths, groups)]
    return BlockParams(depths=depths, widths=widths, group_widths=groups,
                       bottleneck_multipliers=[1.0] * len(widths), strides=[2] * len(widths), se_ratio=se_ratio)


class SwinTrunk(nn.Module):
    """torchvision's Swin feature stages plus its final LayerNorm (UP's ``norm3``), returning
    the last stage as an NCHW map."""

    def __init__(self, net, planes):
        super().__init__()
        self.features, self.norm = net.features, net.norm
        self.out_layers, self.out_planes, self.out_strides = [3], [planes], [32]

    def forward(self, x):
        return [self.norm(self.features(x)).permute(0, 3, 1, 2)]


def build_swin(opts):
    from torchvision.models.swin_transformer import SwinTransformer

    opts.take("pretrain_img_size", 224, types=(int, list))  # sizes only UP's absolute position embedding
    opts.take("ape", False, only=False, why="torchvision's Swin has relative position bias only")
    patch = opts.take("patch_size", 4, types=int)
    embed_dim = opts.take("embed_dim", 96, types=int)
    depths = opts.take("depths", [2, 2, 6, 2], types=list)
    heads = opts.take("num_heads", [3, 6, 12, 24], types=list)
    if len(depths) != len(heads):
        raise ConfigError(opts.at("num_heads"), f"{len(heads)} entries for {len(depths)} stages (depths)")
    window = opts.take("window_size", 7, types=int)
    mlp_ratio = opts.take("mlp_ratio", 4.0, types=float)
    attn_drop = opts.take("attn_drop_rate", 0.0, types=float)
    drop_path = opts.take("drop_path_rate", 0.2, types=float)
    for key, only in (("in_chans", 3), ("qkv_bias", True), ("qk_scale", None), ("drop_rate", 0.0),
                      ("patch_norm", True), ("frozen_stages", -1), ("use_checkpoint", False),
                      ("out_indices", [0, 1, 2, 3]), ("out_stride", [4, 8, 16, 32])):
        value = opts.take(key, only)
        if (list(value) if isinstance(value, tuple) else value) != only:
            raise ConfigError(opts.at(key), f"{value!r} is not supported for UP's swin; only {only!r}")
    opts.done()
    net = SwinTransformer(patch_size=[patch, patch], embed_dim=embed_dim, depths=depths, num_heads=heads,
                          window_size=[window, window], mlp_ratio=mlp_ratio, attention_dropout=attn_drop,
                          stochastic_depth_prob=drop_path, num_classes=1)
    return SwinTrunk(net, embed_dim * 2 ** (len(depths) - 1)), None


def build_backbone(mtype, opts):
    """(trunk, sync-BN group size or None) for a UP backbone type."""
    if mtype in RESNETS + RESNETS_D:
        return build_resnet(mtype, opts)
    if mtype == "mobilenetv2":
        return build_mobilenetv2(opts)
    if mtype in REGNETS:
        return build_regnet(mtype, opts)
    if mtype in VITS:
        return build_vit(mtype, opts)
    if mtype == "mobilenetv3":
        from .mobilenetv3 import build_mobilenetv3

        return build_mobilenetv3(opts)
    if mtype in CONVNEXTS:
        from .convnext import build_convnext

        return build_convnext(mtype, opts)
    if mtype in CSWINS:
        from .cswin import build_cswin

        return build_cswin(mtype, opts)
    return build_swin(opts)


def feature_channels(trunk):
    return list(trunk.out_planes)

