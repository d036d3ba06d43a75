"""UP's ViT / DeiT backbones and ``vit_head`` on torchvision's VisionTransformer.

torchvision's encoder block is UP's (pre-norm attention and MLP, dropout after each, a final
LayerNorm) except for stochastic depth, which torchvision's ViT lacks: UP drops each residual
branch (attention and MLP) per sample with the same ``drop_path`` rate in every block. It is
added here as forward hooks on the branches' last modules (the attention's dropout, the MLP),
so the parameters keep torchvision's names. UP's tanh-approximated GELU and its initialisation
(truncated normal 0.02 for linear weights, unit-normal position embedding) are kept.
"""
import torch
from torch import nn
from torchvision.ops import stochastic_depth

from ...errors import ConfigError, DataError

# UP's defaults per type: (patch size, hidden dim, depth, mlp dim, heads)
VITS = {
    "vit_base_patch32_224": (32, 768, 12, 3072, 12),
    "vit_base_patch16_224": (16, 768, 12, 3072, 12),
    "vit_large_patch16_224": (16, 1024, 24, 4096, 16),
    "vit_huge_patch14_224": (14, 1280, 32, 5120, 16),
    "deit_tiny_patch16_224": (16, 192, 12, 768, 3),
    "deit_small_patch16_224": (16, 384, 12, 1536, 6),
    "deit_base_patch16_224": (16, 768, 12, 3072, 12),
}


class DropPath:
    """Forward hook: per-sample stochastic depth on a residual branch's output (kept with
    probability 1 - p and scaled by 1 / (1 - p) in training, identity in eval)."""

    def __init__(self, p):
        self.p = p

    def __call__(self, module, inputs, output):
        return stochastic_depth(output, self.p, "row", module.training)


class ViTTrunk(nn.Module):
    """Patch embedding, class token and encoder (torchvision's modules and names); returns one
    feature: (patch tokens as an N x C x h x w map, class token N x C), as UP's backbone does."""

    def __init__(self, net, image_size, hidden_dim):
        super().__init__()
        self.conv_proj, self.class_token, self.encoder = net.conv_proj, net.class_token, net.encoder
        self.image_size, self.patch_size = image_size, net.patch_size
        self.out_layers, self.out_planes, self.out_strides = [0], [hidden_dim], [net.patch_size]

    def forward(self, x):
        if x.shape[-2:] != (self.image_size, self.image_size):
            raise DataError(f"net[0].kwargs.image_size: the ViT is built for {self.image_size} x {self.image_size} "
                            f"images (its position embedding), the batch has {x.shape[-2]} x {x.shape[-1]}; "
                            "set image_size to the transforms' output size")
        x = self.conv_proj(x)
        grid = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        x = self.encoder(torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1))
        patches = x[:, 1:].transpose(1, 2).reshape(x.shape[0], x.shape[2], *grid)
        return [(patches, x[:, 0])]


def build_vit(arch, opts):
    from torchvision.models.vision_transformer import VisionTransformer

    patch, hidden, depth, mlp, heads = VITS[arch]
    image_size = opts.take("image_size", 224, types=int, check=lambda v: None if v > 0 else "must be > 0")
    patch = opts.take("patch_size", patch, types=int)
    opts.take("patch_stride", patch, types=int, only=patch, why="UP's ViT embeds with stride patch_size")
    if image_size % patch:
        raise ConfigError(opts.at("image_size"), f"{image_size} is not a multiple of patch_size {patch}")
    opts.ignore("num_classes", "UP's ViT backbone does not read it (the head's num_classes counts)")
    hidden = opts.take("hidden_dim", hidden, types=int)
    depth = opts.take("depth", depth, types=int, check=lambda v: None if v > 0 else "must be > 0")
    mlp = opts.take("mlp_dim", mlp, types=int)
    heads = opts.take("heads", heads, types=int)
    if hidden % heads:
        raise ConfigError(opts.at("heads"), f"{heads} heads do not divide hidden_dim {hidden}")
    in_channel = opts.take("in_channel", 3, types=int)
    rate = lambda v: None if 0 <= v < 1 else "must be in [0, 1)"  # noqa: E731
    dropout = opts.take("dropout", 0.1, types=float, check=rate)
    attention_dropout = opts.take("attention_dropout", 0.1, types=float, check=rate)
    drop_path = opts.take("drop_path", 0.1, types=float, check=rate)
    opts.take("classifier", "token", only="token", why="torchvision's ViT always has a class token")
    activation = opts.take("activation", "gelu", types=str, check=lambda v: None if v in ("gelu", "relu")
                           else "expected gelu or relu")
    opts.take("qkv_bias", True, only=True, why="torchvision's attention always has q/k/v biases")
    out = opts.take("out_indices", -1, types=(int, list))
    if out not in (-1, depth - 1, [-1], [depth - 1]):
        raise ConfigError(opts.at("out_indices"), f"{out!r}: only the last block's output is mapped", "use -1")
    last_norm = opts.take("last_norm", True, types=bool)
    opts.done()
    net = VisionTransformer(image_size, patch, depth, heads, hidden, mlp, dropout=dropout,
                            attention_dropout=attention_dropout, num_classes=1)
    if in_channel != 3:
        net.conv_proj = nn.Conv2d(in_channel, hidden, patch, patch)
    if not last_norm:
        net.encoder.ln = nn.Identity()
    for block in net.encoder.layers:
        block.mlp[1] = nn.GELU(approximate="tanh") if activation == "gelu" else nn.ReLU()
        if drop_path > 0:  # the attention branch ends in block.dropout, the MLP branch in block.mlp
            block.dropout.register_forward_hook(DropPath(drop_path))
            block.mlp.register_forward_hook(DropPath(drop_path))
    trunk = ViTTrunk(net, image_size, hidden)
    _init_like_up(trunk)
    return trunk, None


def _init_like_up(trunk):
    """UP's ViT init: linear weights (q/k/v included) truncated normal 0.02, biases 0, norms
    (1, 0), position embedding N(0, 1), class token 0; the patch conv keeps torch's default."""
    for m in trunk.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.MultiheadAttention):
            nn.init.trunc_normal_(m.in_proj_weight, std=0.02)
            nn.init.zeros_(m.in_proj_bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight), nn.init.zeros_(m.bias)
    nn.init.normal_(trunk.encoder.pos_embedding)
    nn.init.zeros_(trunk.class_token)
    nn.init.kaiming_uniform_(trunk.conv_proj.weight, a=5 ** 0.5)
    fan_in = trunk.conv_proj.weight[0].numel()
    nn.init.uniform_(trunk.conv_proj.bias, -fan_in ** -0.5, fan_in ** -0.5)


class ViTHead(nn.Module):
    """UP's ``vit_head``: the class token (``cls_type: token``) or the mean of the patch tokens
    (``gap``), an optional affine-free BatchNorm (``bn``), an optional tanh pre-logits layer
    (``representation_size``), then a linear ``classifier`` (truncated normal 0.02)."""

    def __init__(self, in_plane, num_classes, feature_idx=-1, cls_type="token", bn=False, representation_size=None):
        super().__init__()
        self.feature_idx, self.cls_type = feature_idx, cls_type
        if bn:
            self.bn = nn.BatchNorm1d(in_plane, affine=False, eps=1e-6)
        width = in_plane
        if representation_size is not None:
            self.pre_logits = nn.Sequential(nn.Linear(in_plane, representation_size), nn.Tanh())
            width = representation_size
        self.multi = isinstance(num_classes, list)
        self.classifier = (nn.ModuleList(nn.Linear(width, n) for n in num_classes) if self.multi
                           else nn.Linear(width, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, features):
        patches, token = features[self.feature_idx]
        x = token if self.cls_type == "token" else patches.flatten(2).mean(-1)
        if hasattr(self, "bn"):
            x = self.bn(x)
        if hasattr(self, "pre_logits"):
            x = self.pre_logits(x)
        return [c(x) for c in self.classifier] if self.multi else self.classifier(x)


def read_vit_head(opts, in_plane, idx, num_classes):
    """The kwargs only ``vit_head`` has (after the shared num_classes / in_plane / index)."""
    opts.take("use_pool", False, types=bool)  # UP's vit_head never pools: it picks tokens
    opts.take("dropout", None, only=None, why="UP's vit_head builds a dropout but never applies it; "
              "use the backbone's dropout")
    # UP reads the class token for "token" and pools the patch tokens for any other value;
    # its MAE fine-tune file writes avg_pool
    cls_type = opts.take("cls_type", "token", types=str, check=lambda v: None if v in ("token", "gap", "avg_pool")
                         else "expected token, gap or avg_pool")
    cls_type = "gap" if cls_type == "avg_pool" else cls_type
    bn = opts.take("bn", None) is not None  # UP: any value but null adds the norm
    rep = opts.take("representation_size", None, types=(int, type(None)))
    opts.done()
    return ViTHead(in_plane, num_classes, idx, cls_type, bn, rep)
