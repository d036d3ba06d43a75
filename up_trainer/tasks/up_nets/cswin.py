"""UP's CSWin transformer backbones (Dong et al., "CSWin Transformer: A General Vision
Transformer Backbone with Cross-Shaped Windows"), built on torch: torchvision has no CSWin.

Modules carry UP's names (``stage1_conv``, ``stage1_norm``, ``stage{1-4}.{j}``, ``merge{1-3}``,
``norm{0-3}``; in a block ``norm1``, ``qkv``, ``attns.{k}.get_v``, ``proj``, ``norm2``,
``mlp.fc1`` / ``mlp.fc2``), so UP's weights load without renaming.

A block normalises its tokens, zero-pads the map at the bottom / right to a multiple of the
stage's ``split_size`` and computes q, k, v once. Outside the last stage half the channels
(and half the heads) attend within vertical stripes (full height, ``split_size`` wide), the
other half within horizontal stripes; in the last stage (or when the stage's nominal
resolution, ``224 / stride``, equals its split size) one branch attends over the whole map.
Each branch adds LePE, a depthwise 3x3 conv of v inside the stripe, to its output. The result
is cropped back, projected, and added (stochastic depth), then the MLP. Stages are joined
by a stride-2 3x3 conv + LayerNorm; each output passes through its ``norm{i}``.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import stochastic_depth

# type -> (embed_dim, depths, heads); every UP 224 model has split sizes 1, 2, 7, 7
CSWINS = {
    "CSWin_64_12211_tiny_224": (64, [1, 2, 21, 1], [2, 4, 8, 16]),
    "CSWin_64_24322_small_224": (64, [2, 4, 32, 2], [2, 4, 8, 16]),
    "CSWin_96_24322_base_224": (96, [2, 4, 32, 2], [4, 8, 16, 32]),
}
SPLITS = [1, 2, 7, 7]
IMG_SIZE = 224  # UP's factories fix it; it only decides which stage counts as "last" (see above)


class Mlp(nn.Module):
    def __init__(self, dim, hidden, drop):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class LePEAttention(nn.Module):
    """Self-attention inside stripes of one orientation (``idx`` 0: full-height columns,
    1: full-width rows, -1: the whole map), plus the locally-enhanced positional term."""

    def __init__(self, dim, idx, split_size, num_heads, attn_drop, qk_scale=None):
        super().__init__()
        self.idx, self.split_size, self.num_heads = idx, split_size, num_heads
        self.scale = qk_scale or (dim // num_heads) ** -0.5
        self.get_v = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim)
        self.attn_drop = nn.Dropout(attn_drop)

    def _stripe(self, h, w):
        if self.idx == -1:
            return h, w
        return (h, self.split_size) if self.idx == 0 else (self.split_size, w)

    def _windows(self, x, h, w, sh, sw):
        """B x (h*w) x C tokens -> (B * windows) x C x sh x sw."""
        b, _, c = x.shape
        x = x.transpose(1, 2).reshape(b, c, h // sh, sh, w // sw, sw)
        return x.permute(0, 2, 4, 1, 3, 5).reshape(-1, c, sh, sw)

    def _heads(self, x):
        """(B') x C x sh x sw -> B' x heads x (sh*sw) x C/heads."""
        n, c = x.shape[:2]
        return x.reshape(n, self.num_heads, c // self.num_heads, -1).transpose(2, 3)

    def forward(self, q, k, v, h, w):
        b, _, c = q.shape
        sh, sw = self._stripe(h, w)
        q, k, v = (self._windows(t, h, w, sh, sw) for t in (q, k, v))
        lepe = self._heads(self.get_v(v))
        q, k, v = self._heads(q) * self.scale, self._heads(k), self._heads(v)
        attn = self.attn_drop((q @ k.transpose(-2, -1)).softmax(-1))
        x = (attn @ v + lepe).transpose(1, 2).reshape(-1, sh, sw, c)  # windows x sh x sw x C
        x = x.reshape(b, h // sh, w // sw, sh, sw, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(b, h * w, c)


class CSWinBlock(nn.Module):
    def __init__(self, dim, reso, num_heads, split_size, mlp_ratio, qkv_bias, qk_scale, drop, attn_drop,
                 drop_path, last_stage):
        super().__init__()
        self.split_size, self.drop_path = split_size, drop_path
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.norm1 = nn.LayerNorm(dim)
        last_stage = last_stage or reso == split_size
        if last_stage:
            self.attns = nn.ModuleList([LePEAttention(dim, -1, split_size, num_heads, attn_drop, qk_scale)])
        else:
            self.attns = nn.ModuleList([LePEAttention(dim // 2, i, split_size, num_heads // 2, attn_drop, qk_scale)
                                        for i in range(2)])
        self.proj = nn.Linear(dim, dim)  # UP builds a dropout after it that it never applies: none here
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop)
        self.norm2 = nn.LayerNorm(dim)

    def _residual(self, x, branch):
        return x + stochastic_depth(branch, self.drop_path, "row", self.training)

    def forward(self, x, h, w):
        b, _, c = x.shape
        img = self.norm1(x).view(b, h, w, c)
        pad_w, pad_h = (-w) % self.split_size, (-h) % self.split_size
        img = F.pad(img, (0, 0, 0, pad_w, 0, pad_h))
        hp, wp = h + pad_h, w + pad_w
        q, k, v = self.qkv(img.view(b, hp * wp, c)).chunk(3, dim=-1)
        if len(self.attns) == 2:
            half = c // 2
            out = torch.cat([self.attns[0](q[..., :half], k[..., :half], v[..., :half], hp, wp),
                             self.attns[1](q[..., half:], k[..., half:], v[..., half:], hp, wp)], dim=2)
        else:
            out = self.attns[0](q, k, v, hp, wp)
        out = self.proj(out)
        if pad_w or pad_h:
            out = out.view(b, hp, wp, c)[:, :h, :w].reshape(b, h * w, c)
        x = self._residual(x, out)
        return self._residual(x, self.mlp(self.norm2(x)))


class MergeBlock(nn.Module):
    """Between stages: a stride-2 3x3 conv on the token map, then LayerNorm."""

    def __init__(self, dim, dim_out):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(dim, dim_out, 3, 2, 1), nn.LayerNorm(dim_out)

    def forward(self, x, h, w):
        b, _, c = x.shape
        x = self.conv(x.transpose(1, 2).reshape(b, c, h, w))
        return self.norm(x.flatten(2).transpose(1, 2))


class CSWinTransformer(nn.Module):
    def __init__(self, embed_dim, depths, heads, splits=SPLITS, img_size=IMG_SIZE, in_chans=3, mlp_ratio=4.0,
                 qkv_bias=True, qk_scale=None, drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0):
        super().__init__()
        self.stage1_conv = nn.Conv2d(in_chans, embed_dim, 7, 4, 2)
        self.stage1_norm = nn.LayerNorm(embed_dim)
        rates = torch.linspace(0, drop_path_rate, sum(depths), device="cpu").tolist()
        dims = [embed_dim * 2 ** i for i in range(4)]
        for i in range(4):
            first = sum(depths[:i])
            self.add_module(f"stage{i + 1}", nn.ModuleList(
                CSWinBlock(dims[i], img_size // 2 ** (i + 2), heads[i], splits[i], mlp_ratio, qkv_bias, qk_scale,
                           drop_rate, attn_drop_rate, rates[first + j], last_stage=i == 3)
                for j in range(depths[i])))
            if i < 3:
                self.add_module(f"merge{i + 1}", MergeBlock(dims[i], dims[i + 1]))
        for i in range(4):
            self.add_module(f"norm{i}", nn.LayerNorm(dims[i]))
        self.out_layers, self.out_planes, self.out_strides = [0, 1, 2, 3], dims, [4, 8, 16, 32]
        for m in self.modules():  # UP's init: Linear truncated normal 0.02, zero bias; LayerNorm 1, 0
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.stage1_conv(x)
        b, _, h, w = x.shape
        x = self.stage1_norm(x.flatten(2).transpose(1, 2))
        outs = []
        for i in range(4):
            if i:
                x = getattr(self, f"merge{i}")(x, h, w)
                h, w = (h + 1) // 2, (w + 1) // 2
            for block in getattr(self, f"stage{i + 1}"):
                x = block(x, h, w)
            out = getattr(self, f"norm{i}")(x)
            outs.append(out.view(b, h, w, -1).permute(0, 3, 1, 2).contiguous())
        return outs


def build_cswin(arch, opts):
    embed_dim, depths, heads = CSWINS[arch]
    opts.ignore("pretrained", "UP's CSWin factories take it and do nothing with it")
    opts.ignore("num_classes", "UP's CSWin backbone stores it but builds no classifier")
    in_chans = opts.take("in_chans", 3, types=int, check=lambda v: None if v > 0 else "must be > 0")
    qkv_bias = opts.take("qkv_bias", True, types=bool)
    qk_scale = opts.take("qk_scale", None, types=(float, type(None)))
    rates = {key: opts.take(key, 0.0, types=float, check=lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
             for key in ("drop_rate", "attn_drop_rate", "drop_path_rate")}
    opts.take("out_indices", [0, 1, 2, 3], types=(list, tuple), check=lambda v: None if list(v) == [0, 1, 2, 3] else
              "only [0, 1, 2, 3]: UP's CSWin counts outputs only from the first index on")
    opts.take("out_strides", [4, 8, 16, 32], types=list, only=[4, 8, 16, 32])
    opts.take("hybrid_backbone", None, only=None, why="UP's CSWin never uses it")
    opts.take("use_chk", False, only=False, why="use the memory_checkpoint hook")
    opts.done()
    return CSWinTransformer(embed_dim, depths, heads, in_chans=in_chans, qkv_bias=qkv_bias, qk_scale=qk_scale,
                            **rates), None
