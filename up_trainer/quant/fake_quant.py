"""A tensor's fake quantization: observe its range while training, round it onto the integer grid.

:class:`FakeQuantizer` keeps every piece of state (observed range, scale, zero point, a learned
scale) as buffers or parameters of fixed shape, created at wrap time: the checkpoint holds them,
a resumed run continues from them bitwise, and the EMA's state dict never changes shape. Ranges
are observed only in training mode, so evaluation never moves them. The rounding itself is
torch's ``fake_quantize_per_{tensor,channel}_affine`` (straight-through gradient), which the ONNX
exporter writes as a QuantizeLinear / DequantizeLinear pair.
"""
import torch
from torch import nn

from .ranges import observe_range, qparams


class FakeQuantizer(nn.Module):
    """One tensor kind's quantizer (a layer's weight, or the activation entering it).

    ``scheme`` is a checked scheme of the ``quant`` section (spec.py); ``channels`` the size of
    axis 0 for a per-channel scheme. Weights are observed afresh at each training step (their
    range is their current value); activations accumulate (minmax) or average (ema_*).
    """

    def __init__(self, scheme, channels=1, is_weight=False, device=None):
        super().__init__()
        self.scheme, self.is_weight = dict(scheme), is_weight
        self.per_channel = bool(scheme["per_channel"]) and is_weight
        n = channels if self.per_channel else 1
        bits, symmetric = scheme["bits"], scheme["symmetric"]
        self.quant_min = -(2 ** (bits - 1)) if symmetric else 0
        self.quant_max = 2 ** (bits - 1) - 1 if symmetric else 2 ** bits - 1
        self.register_buffer("min_val", torch.full((n,), float("inf"), device=device))
        self.register_buffer("max_val", torch.full((n,), float("-inf"), device=device))
        self.register_buffer("zero_point", torch.zeros(n, dtype=torch.int32, device=device))
        self.learnable = scheme["fake_quantize"] == "learnable"
        scale = torch.ones(n, device=device)
        if self.learnable:  # LSQ: the scale is trained; the observer only gives its first value
            self.scale = nn.Parameter(scale)
            self.register_buffer("initialized", torch.zeros((), dtype=torch.bool, device=device))
        else:
            self.register_buffer("scale", scale)

    def extra_repr(self):
        kind = "per-channel" if self.per_channel else "per-tensor"
        return f"[{self.quant_min}, {self.quant_max}] {kind} {self.scheme['observer']} {self.scheme['fake_quantize']}"

    @torch.no_grad()
    def _observe(self, x):
        low, high = observe_range(x, self.scheme, self.per_channel, self.quant_min, self.quant_max)
        first = bool(torch.isinf(self.min_val).all())
        if self.is_weight or first:  # a weight's range is its current value
            self.min_val.copy_(low)
            self.max_val.copy_(high)
        elif self.scheme["observer"] in ("ema_minmax", "ema_mse"):
            r = self.scheme["ema_ratio"]
            self.min_val.mul_(r).add_(low, alpha=1 - r)
            self.max_val.mul_(r).add_(high, alpha=1 - r)
        else:  # minmax / mse on activations: the widest range seen so far
            torch.minimum(self.min_val, low, out=self.min_val)
            torch.maximum(self.max_val, high, out=self.max_val)
        scale, zero_point = qparams(self.min_val, self.max_val, self.scheme, self.quant_min, self.quant_max)
        self.zero_point.copy_(zero_point)
        if not self.learnable:
            self.scale.copy_(scale)
        elif not bool(self.initialized):
            self.scale.copy_(scale)
            self.initialized.fill_(True)

    def forward(self, x):
        if x.dtype != torch.float32:  # under autocast: torch's fake-quantize kernels take float32
            return self.forward(x.float()).to(x.dtype)
        if self.training and (not self.learnable or not bool(self.initialized)):
            self._observe(x)
        if self.learnable and self.training:
            grad_factor = 1.0 / float(x.numel() / max(1, self.scale.numel()) * self.quant_max) ** 0.5
            if self.per_channel:
                return torch._fake_quantize_learnable_per_channel_affine(
                    x, self.scale, self.zero_point.float(), 0, self.quant_min, self.quant_max, grad_factor)
            return torch._fake_quantize_learnable_per_tensor_affine(
                x, self.scale, self.zero_point.float(), self.quant_min, self.quant_max, grad_factor)
        scale = self.scale.detach() if self.learnable else self.scale
        if self.per_channel:
            return torch.fake_quantize_per_channel_affine(x, scale, self.zero_point, 0, self.quant_min, self.quant_max)
        return torch.fake_quantize_per_tensor_affine(x, scale, self.zero_point, self.quant_min, self.quant_max)


class QuantConv2d(nn.Conv2d):
    """A Conv2d whose input and weight pass through fake quantizers (the class a wrapped
    Conv2d takes in place: its parameters, names and hooks stay)."""

    def forward(self, x):
        return self._conv_forward(self.input_quant(x), self.weight_quant(self.weight), self.bias)


class QuantLinear(nn.Linear):
    """A Linear whose input and weight pass through fake quantizers."""

    def forward(self, x):
        return nn.functional.linear(self.input_quant(x), self.weight_quant(self.weight), self.bias)


QUANT_CLASSES = {nn.Conv2d: QuantConv2d, nn.Linear: QuantLinear}
