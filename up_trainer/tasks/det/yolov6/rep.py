"""RepVGG-style blocks of YOLOv6 (with the names of UP's yolov6 plugin's components): a 3x3
conv-BN, a 1x1 conv-BN and (same channels, stride 1) an identity BN, summed,
then the activation. Trained in that multi-branch form; :meth:`RepVGGBlock.fuse_branches`
folds the three branches into one 3x3 convolution with bias (``rbr_reparam``) that gives the
same outputs in eval mode (BatchNorm with running statistics is affine per channel, and the
1x1 and identity branches are 3x3 kernels with zeros around the centre), which is what export
writes (:func:`fuse_rep_blocks`).
"""
import torch
import torch.nn.functional as F
from torch import nn


def conv_bn(cin, cout, kernel_size, stride, padding, norm):
    """UP's ``conv_bn``: a Sequential of ``conv`` (no bias) and ``bn``."""
    seq = nn.Sequential()
    seq.add_module("conv", nn.Conv2d(cin, cout, kernel_size, stride, padding, bias=False))
    seq.add_module("bn", norm(cout))
    return seq


def _fold(kernel, bn):
    """(kernel x gamma / std, beta - mean x gamma / std) of a conv kernel followed by ``bn`` in eval mode."""
    scale = bn.weight / (bn.running_var + bn.eps).sqrt()
    return kernel * scale.reshape(-1, 1, 1, 1), bn.bias - bn.running_mean * scale


class RepVGGBlock(nn.Module):
    """3x3 conv (``stride``) + 1x1 conv + identity BN branches, summed, then ``act``.

    ``norm(channels)`` builds the BatchNorms, ``act()`` the activation (UP's ``normalize`` and
    ``act_fn``). After :meth:`fuse_branches` the block is one conv with bias and the
    activation (UP's deploy form)."""

    def __init__(self, cin, cout, stride=1, norm=nn.BatchNorm2d, act=nn.ReLU):
        super().__init__()
        self.in_channels, self.out_channels, self.stride = cin, cout, stride
        self.nonlinearity = act()
        self.se = nn.Identity()  # UP keeps the slot (no squeeze-excite in YOLOv6)
        self.rbr_identity = norm(cin) if cin == cout and stride == 1 else None
        self.rbr_dense = conv_bn(cin, cout, 3, stride, 1, norm)
        self.rbr_1x1 = conv_bn(cin, cout, 1, stride, 0, norm)
        self.rbr_reparam = None

    def forward(self, x):
        if self.rbr_reparam is not None:
            return self.nonlinearity(self.se(self.rbr_reparam(x)))
        out = self.rbr_dense(x) + self.rbr_1x1(x)
        if self.rbr_identity is not None:
            out = out + self.rbr_identity(x)
        return self.nonlinearity(self.se(out))

    @torch.no_grad()
    def equivalent_kernel_bias(self):
        """The one 3x3 kernel and bias the three branches equal in eval mode."""
        kernel, bias = _fold(self.rbr_dense.conv.weight, self.rbr_dense.bn)
        k1, b1 = _fold(self.rbr_1x1.conv.weight, self.rbr_1x1.bn)
        kernel, bias = kernel + F.pad(k1, [1, 1, 1, 1]), bias + b1
        if self.rbr_identity is not None:
            eye = torch.zeros_like(kernel)
            eye[torch.arange(self.in_channels), torch.arange(self.in_channels), 1, 1] = 1.0
            ki, bi = _fold(eye, self.rbr_identity)
            kernel, bias = kernel + ki, bias + bi
        return kernel, bias

    @torch.no_grad()
    def fuse_branches(self):
        """Replace the branches by ``rbr_reparam`` (idempotent). Uses the BatchNorms' running
        statistics: the fused block equals the unfused one in eval mode."""
        if self.rbr_reparam is not None:
            return
        kernel, bias = self.equivalent_kernel_bias()
        conv = nn.Conv2d(self.in_channels, self.out_channels, 3, self.stride, 1, bias=True).to(kernel.device)
        conv.weight.copy_(kernel)
        conv.bias.copy_(bias)
        self.rbr_reparam = conv
        del self.rbr_dense, self.rbr_1x1, self.rbr_identity
        self.rbr_dense = self.rbr_1x1 = self.rbr_identity = None


class RepBlock(nn.Module):
    """UP's ``RepBlock``: ``n`` RepVGG blocks (``conv1`` changes the channels, ``block`` the rest)."""

    def __init__(self, cin, cout, n=1, norm=nn.BatchNorm2d, act=nn.ReLU):
        super().__init__()
        self.conv1 = RepVGGBlock(cin, cout, norm=norm, act=act)
        self.block = nn.Sequential(*(RepVGGBlock(cout, cout, norm=norm, act=act) for _ in range(n - 1))) \
            if n > 1 else None

    def forward(self, x):
        x = self.conv1(x)
        return x if self.block is None else self.block(x)


def fuse_rep_blocks(module):
    """Fuse every RepVGG block of ``module`` (in place; the module should be in eval mode);
    the number of blocks fused."""
    blocks = [m for m in module.modules() if isinstance(m, RepVGGBlock)]
    for block in blocks:
        block.fuse_branches()
    return len(blocks)
