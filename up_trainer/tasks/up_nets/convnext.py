"""UP's ``convnext_tiny`` / ``convnext_small`` backbones on torchvision's ConvNeXt, and UP's
``convnext_head``.

The trunk is torchvision's ``features`` (stem, then stage / downsample pairs) run stage by
stage; UP's outputs are the four stage outputs (strides 4, 8, 16, 32) selected by
``out_layers``. torchvision's ConvNeXt has the same blocks as UP's (depthwise 7x7, LayerNorm,
Linear 4x, GELU, Linear, layer scale, stochastic depth rising linearly from 0 to
``drop_path_rate`` over all blocks), so UP's weights load through :mod:`.keymap` (UP's
per-channel ``gamma`` of shape C becomes torchvision's ``layer_scale`` of shape C x 1 x 1, see
:func:`reshape_layer_scales`). UP initialises only the convolutions (truncated normal 0.02,
zero bias) and leaves the Linear layers at PyTorch's default; the same here.

``convnext_head`` is UP's base head with a LayerNorm (``layer_norm``) between the pooling and
the classifier, whose initial weight and bias are scaled by ``head_init_scale``.
"""
import torch
from torch import nn

# UP's factories fix depths and dims; a user cannot pass them (UP: "multiple values" TypeError).
CONVNEXTS = {"convnext_tiny": ([3, 3, 9, 3], [96, 192, 384, 768]),
             "convnext_small": ([3, 3, 27, 3], [96, 192, 384, 768])}
ACTIVATIONS = {None: nn.GELU, "gelu": nn.GELU, "relu": nn.ReLU, "selu": nn.SELU, "leaky_relu": nn.LeakyReLU}


class ConvNeXtTrunk(nn.Module):
    """torchvision's ConvNeXt ``features``; stage i is ``features[2i]`` (stem / downsample)
    then ``features[2i + 1]`` (blocks)."""

    def __init__(self, features, dims, out_layers, out_strides):
        super().__init__()
        self.features = features
        self.out_layers, self.out_strides = list(out_layers), list(out_strides)
        self.out_planes = [dims[i] for i in self.out_layers]

    def forward(self, x):
        outs = []
        for i in range(max(self.out_layers) + 1):
            x = self.features[2 * i + 1](self.features[2 * i](x))
            outs.append(x)
        return [outs[i] for i in self.out_layers]


def convnext_trunk(depths, dims, drop_path_rate=0.0, layer_scale=1e-6, activation=None, in_channels=3,
                   out_layers=(0, 1, 2, 3), out_strides=(4, 8, 16, 32)):
    """A ConvNeXt trunk of any depths / widths (UP's two types use :data:`CONVNEXTS`; tests use
    narrow ones)."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    settings = [CNBlockConfig(d, dims[i + 1] if i + 1 < len(dims) else None, n) for i, (d, n) in
                enumerate(zip(dims, depths))]
    net = ConvNeXt(settings, stochastic_depth_prob=drop_path_rate, layer_scale=layer_scale, num_classes=1)
    features = net.features
    if in_channels != 3:
        stem = features[0][0]
        features[0][0] = nn.Conv2d(in_channels, stem.out_channels, stem.kernel_size, stem.stride)
    for m in features.modules():
        if isinstance(m, nn.Linear):  # UP leaves its Linear layers at PyTorch's default init
            m.reset_parameters()
        elif isinstance(m, nn.Conv2d):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
    if ACTIVATIONS[activation] is not nn.GELU:
        for stage in features[1::2]:
            for block in stage:
                block.block[4] = ACTIVATIONS[activation]()
    return ConvNeXtTrunk(features, dims, out_layers, out_strides)


def build_convnext(arch, opts):
    depths, dims = CONVNEXTS[arch]
    opts.take("pretrained", False, only=False, why="UP downloads the official weights; give them as "
              "saver.pretrain_model (UP's key names load through the name map)")
    opts.ignore("num_classes", "UP's ConvNeXt backbone takes it but builds no classifier")
    in_channels = opts.take("in_chans", 3, types=int, check=lambda v: None if v > 0 else "must be > 0")
    drop_path = opts.take("drop_path_rate", 0.0, types=float, check=lambda v: None if 0 <= v < 1 else
                          "must be in [0, 1)")
    layer_scale = opts.take("layer_scale_init_value", 1e-6, types=float, check=lambda v: None if v > 0 else
                            "must be > 0: UP drops the layer scale at 0, torchvision's block always has one")
    activation = opts.take("act_func", None, types=(str, type(None)), check=lambda v: None if v in ACTIVATIONS
                           else f"expected one of gelu, relu, selu, leaky_relu, got {v!r}")
    out_layers = opts.take("out_layers", [0, 1, 2, 3], types=list, check=lambda v: None if v and all(
        isinstance(i, int) and 0 <= i <= 3 for i in v) else f"stage indices are 0..3, got {v}")
    natural = [[4, 8, 16, 32][i] for i in out_layers]
    opts.take("out_strides", natural, types=list, check=lambda v: None if v == natural else
              f"{v}: the strides follow from out_layers: {natural}")
    opts.done()
    return convnext_trunk(depths, dims, drop_path, layer_scale, activation, in_channels, out_layers, natural), None


def reshape_layer_scales(state, prefix):
    """UP's ``gamma`` (C) renamed to ``layer_scale`` takes torchvision's shape C x 1 x 1."""
    return {k: v.reshape(-1, 1, 1) if k.startswith(prefix + ".") and k.endswith(".layer_scale") and v.dim() == 1
            else v for k, v in state.items()}


class ConvNeXtHead(nn.Module):
    """UP's ``convnext_head``: average pool, LayerNorm (eps 1e-6), optional dropout, linear
    classifier(s) (a ModuleList for several heads) with truncated-normal (0.02) weights and zero
    bias, both times ``head_init_scale``. Names and forward as :class:`.cls.ClsHead`'s."""

    def __init__(self, in_plane, num_classes, feature_idx=-1, dropout=None, head_init_scale=1.0):
        super().__init__()
        self.feature_idx = feature_idx
        self.multi = isinstance(num_classes, list)
        self.pool = nn.AdaptiveAvgPool2d(1)
        if dropout is not None:
            self.drop = nn.Dropout(dropout)
        self.classifier = (nn.ModuleList(nn.Linear(in_plane, n) for n in num_classes) if self.multi
                           else nn.Linear(in_plane, num_classes))
        with torch.no_grad():
            for m in self.classifier.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    nn.init.zeros_(m.bias)
                    m.weight.mul_(head_init_scale)
                    m.bias.mul_(head_init_scale)
        self.layer_norm = nn.LayerNorm(in_plane, eps=1e-6)

    def forward(self, features):
        x = self.layer_norm(self.pool(features[self.feature_idx]).flatten(1))
        if hasattr(self, "drop"):
            x = self.drop(x)
        return [c(x) for c in self.classifier] if self.multi else self.classifier(x)


def read_convnext_head(opts, in_plane, idx, num_classes):
    opts.take("use_pool", True, only=True, why="the head pools the backbone's feature map")
    dropout = opts.take("dropout", None, types=(float, type(None)),
                        check=lambda v: None if v is None or 0 <= v < 1 else "must be in [0, 1)")
    scale = opts.take("head_init_scale", 1.0, types=float)
    opts.done()
    return ConvNeXtHead(in_plane, num_classes, idx, dropout, scale)
