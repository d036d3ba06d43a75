"""The pretraining encoder: a backbone ``{type, kwargs}`` from ``SSL_BACKBONES`` (UP's backbones,
registered by tasks/up_nets/ssl_backbones.py) and its pooled embedding.

The embedding is what a linear probe's head reads: the mean of the last feature map (ResNet,
RegNet, MobileNet...) or the class token (ViT).
"""
import math
from typing import Any, NamedTuple

import torch
from torch import nn

from ...errors import ConfigError, join_path
from ...registry import SSL_BACKBONES


class Encoder(NamedTuple):
    trunk: Any  # the module: list of feature maps out (a ViT: [(patch map, class token)])
    width: int  # the embedding's width
    sync_bn_group_size: Any  # a UP backbone's normalize: sync_bn (None: not asked for)
    is_vit: bool  # patch tokens and a class token (what MAE masks)


def build_encoder(spec, path):
    """The :class:`Encoder` of ``{type, kwargs}``; ``path`` names the spec in messages."""
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise ConfigError(path, "expected {type: <backbone>, kwargs: {...}}", "e.g. {type: resnet18}")
    for key in spec:
        if key not in ("type", "kwargs"):
            raise ConfigError(join_path(path, key), "unknown key", "a backbone is {type, kwargs}")
    build = SSL_BACKBONES.get(spec["type"], join_path(path, "type"))
    return build(spec.get("kwargs"), join_path(path, "kwargs"))


def embed(trunk, images):
    """The pooled embedding N x D of the trunk's last output."""
    last = trunk(images)[-1]
    if isinstance(last, tuple):  # a ViT: (patch map, class token)
        return last[1]
    return last.mean(dim=(2, 3))


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
