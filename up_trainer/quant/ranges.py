"""Ranges and quantization parameters: the observers UP (MQBench) names, as plain functions.

``minmax`` takes the tensor's extremes; ``mse`` searches a shrinking clipping range for the one
whose rounding error (L_p norm, UP's ``p``, 2.4 in its files) is smallest, trading clipped
outliers for a finer grid. The ``ema_`` variants differ only in how a FakeQuantizer keeps the
result from batch to batch (fake_quant.py).
"""
import torch

MSE_STEPS = 20  # candidate clipping ranges: 1, 0.95, ... 0.05 of the extremes


def _extremes(x, per_channel):
    if per_channel:
        flat = x.reshape(x.shape[0], -1)
        return flat.amin(dim=1), flat.amax(dim=1)
    return x.amin().reshape(1), x.amax().reshape(1)


def qparams(low, high, scheme, quant_min, quant_max):
    """(scale, zero_point) for the range [low, high] (which always holds 0, as a zero must round
    exactly). Symmetric: zero point 0, scale amax / quant_max; power-of-two scales rounded up to
    the next power of two (a DPU shifts instead of multiplying)."""
    low = torch.clamp(low, max=0.0)
    high = torch.clamp(high, min=0.0)
    eps = torch.finfo(torch.float32).eps
    if scheme["symmetric"]:
        amax = torch.maximum(-low, high)
        scale = torch.clamp(amax / quant_max, min=eps)
        if scheme["pot_scale"]:
            scale = torch.pow(2.0, torch.ceil(torch.log2(scale)))
        zero_point = torch.zeros_like(scale, dtype=torch.int32)
    else:
        scale = torch.clamp((high - low) / (quant_max - quant_min), min=eps)
        zero_point = torch.clamp(quant_min - torch.round(low / scale), quant_min, quant_max).to(torch.int32)
    return scale, zero_point


def _rounding_error(x, low, high, scheme, quant_min, quant_max, per_channel):
    scale, zero_point = qparams(low, high, scheme, quant_min, quant_max)
    if per_channel:
        q = torch.fake_quantize_per_channel_affine(x, scale, zero_point, 0, quant_min, quant_max)
        return (q - x).abs().pow(scheme["p"]).reshape(x.shape[0], -1).mean(dim=1)
    q = torch.fake_quantize_per_tensor_affine(x, scale, zero_point, quant_min, quant_max)
    return (q - x).abs().pow(scheme["p"]).mean().reshape(1)


def observe_range(x, scheme, per_channel, quant_min, quant_max):
    """The range ``x`` is quantized over under ``scheme['observer']``: (low, high), one value
    per channel or one for the tensor."""
    x = x.detach().float()
    low, high = _extremes(x, per_channel)
    if scheme["observer"] not in ("mse", "ema_mse"):
        return low, high
    best_low, best_high = low.clone(), high.clone()
    best = torch.full_like(low, float("inf"))
    for i in range(MSE_STEPS):
        factor = 1.0 - i / MSE_STEPS
        error = _rounding_error(x, low * factor, high * factor, scheme, quant_min, quant_max, per_channel)
        better = error < best
        best = torch.where(better, error, best)
        best_low = torch.where(better, low * factor, best_low)
        best_high = torch.where(better, high * factor, best_high)
    return best_low, best_high
