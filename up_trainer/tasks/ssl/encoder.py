"""The pretraining encoder: a UP backbone (``{type, kwargs}`` as in a UP ``net`` entry) and its
pooled embedding.

The trunk is built by the same code as a classifier's backbone (up_nets/backbones.py), so its
parameter names are a classifier's ``backbone.*`` names. The embedding is what a linear probe's
head reads: the mean of the last feature map (ResNet, RegNet, MobileNet...) or the class token
(ViT). UP's ``moco_vit_small`` / ``moco_vit_base`` are the DeiT-S / ViT-B trunks with MoCo v3's
choices: fixed 2-D sine-cosine position embedding, no dropout, and ``stop_grad_conv1`` (a frozen
random patch projection).
"""
import math

import torch
from torch import nn

from ...errors import ConfigError, join_path

# UP's MoCo v3 ViTs: the classifier type whose trunk they are, and their head count (MoCo v3's
# ViT-S has 12 heads where DeiT-S has 6).
MOCO_VITS = {"moco_vit_small": ("deit_small_patch16_224", 12), "moco_vit_base": ("vit_base_patch16_224", 12)}


def encoder_types():
    from ..up_nets.backbones import BACKBONES

    return tuple(BACKBONES) + tuple(MOCO_VITS)


def build_encoder(spec, path):
    """(trunk, embedding width, sync-BN group size) from ``{type, kwargs}``; ``path`` names the spec."""
    from ..up_nets.backbones import BACKBONES, build_backbone
    from ..up_nets.options import Options

    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise ConfigError(path, "expected {type: <backbone>, kwargs: {...}}", "e.g. {type: resnet18}")
    for key in spec:
        if key not in ("type", "kwargs"):
            raise ConfigError(join_path(path, key), "unknown key", "a backbone is {type, kwargs}")
    mtype, kwpath = spec["type"], join_path(path, "kwargs")
    if mtype not in encoder_types():
        raise ConfigError(join_path(path, "type"), f"{mtype!r} is not a mapped backbone",
                          f"mapped: {', '.join(encoder_types())}")
    if mtype in MOCO_VITS:
        return build_moco_vit(mtype, Options(spec.get("kwargs"), kwpath, mtype))
    opts = Options(spec.get("kwargs"), kwpath, mtype)
    trunk, sync = build_backbone(mtype, opts)
    return trunk, trunk.out_planes[-1], sync


def embed(trunk, images):
    """The pooled embedding N x D of the trunk's last output."""
    last = trunk(images)[-1]
    if isinstance(last, tuple):  # a ViT: (patch map, class token)
        return last[1]
    return last.mean(dim=(2, 3))


def build_moco_vit(mtype, opts):
    from ..up_nets.backbones import build_backbone
    from ..up_nets.options import Options

    arch, heads = MOCO_VITS[mtype]
    stop_grad = opts.take("stop_grad_conv1", False, types=bool)
    image_size = opts.take("image_size", opts.take("img_size", 224, types=int), types=int)
    drop_path = opts.take("drop_path_rate", 0.0, types=float)
    opts.done()
    inner = Options({"image_size": image_size, "heads": heads, "dropout": 0.0, "attention_dropout": 0.0,
                     "drop_path": drop_path}, opts.path, mtype)
    trunk, _ = build_backbone(arch, inner)
    pos = trunk.encoder.pos_embedding
    grid = image_size // trunk.patch_size
    with torch.no_grad():
        pos.copy_(sincos_position_embedding(grid, pos.shape[-1], class_token=True))
    pos.requires_grad_(False)  # MoCo v3: a fixed position embedding
    if stop_grad:  # MoCo v3's trick against instability: the random patch projection stays as built
        trunk.conv_proj.requires_grad_(False)
    return trunk, trunk.out_planes[-1], None


def sincos_position_embedding(grid, dim, class_token):
    """1 x (grid^2 [+1]) x dim: sine-cosine of the patch row and column (a zero row for the class token)."""
    if dim % 4:
        raise ConfigError(None, f"a 2-D sine-cosine position embedding needs a width divisible by 4, got {dim}")
    quarter = dim // 4
    omega = 1.0 / (10000 ** (torch.arange(quarter, dtype=torch.float64) / quarter))
    ys, xs = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64),
                            indexing="ij")
    out_x, out_y = xs.reshape(-1, 1) * omega, ys.reshape(-1, 1) * omega
    table = torch.cat([out_x.sin(), out_x.cos(), out_y.sin(), out_y.cos()], dim=1).float()
    if class_token:
        table = torch.cat([torch.zeros(1, dim), table])
    return table.unsqueeze(0)


def mlp(sizes, bn=True, last_bn=False, bias=True, affine_last=True):
    """Linear layers of ``sizes`` with BatchNorm (optional) and ReLU between them; ``last_bn``:
    a BatchNorm after the last one too (MoCo v3, SimSiam)."""
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        layers.append(nn.Linear(a, b, bias=bias))
        if not last:
            if bn:
                layers.append(nn.BatchNorm1d(b))
            layers.append(nn.ReLU(inplace=True))
        elif last_bn:
            layers.append(nn.BatchNorm1d(b, affine=affine_last))
    return nn.Sequential(*layers)


def check_positive(value, path):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(path, f"expected a positive integer, got {value!r}")
    return value


def check_unit(value, path, low_open=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (0 < value if low_open else 0 <= value) or not value < 1:
        raise ConfigError(path, f"expected a number in {'(0' if low_open else '[0'}, 1), got {value!r}")
    return float(value)


# UP's ssl net keeps its online encoder under the wrapper's name: ``backbone.encoder_q.*`` (MoCo),
# ``backbone.encoder.*`` (SimCLR, SimSiam), ``backbone.base_encoder.*`` (MoCo v3).
UP_ONLINE_ENCODERS = ("encoder_q", "base_encoder", "encoder")


def up_online_encoder_keys(state, part, own_keys):
    """A UP ssl checkpoint's online encoder renamed to the classifier's ``<part>.*`` (other
    weights pass unchanged); our own checkpoints already use ``<part>.*``, and a backbone whose
    own modules carry such a name (a ViT's ``encoder``) is left alone."""
    for wrapper in UP_ONLINE_ENCODERS:
        prefix = f"{part}.{wrapper}."
        if any(k.startswith(prefix) for k in own_keys):
            continue
        if any(k.startswith(prefix) for k in state):
            return {(f"{part}." + k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state.items()}
    return state
