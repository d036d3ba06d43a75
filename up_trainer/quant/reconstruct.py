"""Post-training weight rounding learned by reconstruction: AdaRound (layer by layer), BRECQ
(block by block) and QDrop (BRECQ with activation quantization randomly dropped).

Round-to-nearest is the best rounding of each weight alone, not of a layer's output: AdaRound
learns, per weight, whether to round down or up. Each weight is ``scale * (floor(w / scale) +
h(V))`` with h the rectified sigmoid ``clamp(sigmoid(V) * 1.2 - 0.1, 0, 1)``, V started where h
equals the weight's fractional part (so the start is the float weight), and V trained with Adam to
minimise the unit's output error against the float net's output plus ``rounding_weight`` times
``sum(1 - |2 h(V) - 1| ** beta)``, a regulariser that pushes every h to 0 or 1 as beta is annealed
from ``beta[0]`` down to ``beta[1]`` (it is off for the first ``warm_up`` share of the iterations).
At the end h is rounded to 0 / 1 and the weights written back onto the quantization grid, so the
layer's own weight quantizer leaves them unchanged.

The unit's input is taken from the quantized net (earlier units already rounded, so their error is
seen and compensated), its target output from the float net. QDrop replaces each input element by
its float value with probability ``drop_prob`` and, inside the unit, leaves each activation
unquantized with the same probability, which flattens the loss surface the rounding is fitted on.
``scale_lr`` > 0 also trains the unit's activation scales (LSQ's gradient) alongside.
"""
import logging

import torch
from torch import nn

from .fake_quant import QUANT_CLASSES

log = logging.getLogger("up")

ZETA, GAMMA = 1.1, -0.1  # h's stretch: sigmoid scaled to (-0.1, 1.1), then clipped, so 0 and 1 are reached
MAX_BLOCK_LAYERS = 8  # a module with more quantized layers than this is split into its children


def is_quant_layer(module):
    return type(module) in QUANT_CLASSES.values()


def _channel_shape(weight):
    return [-1] + [1] * (weight.dim() - 1)


class AdaRoundWeight(nn.Module):
    """Stands in for a layer's weight quantizer during reconstruction: its weight with learned rounding."""

    def __init__(self, quantizer, weight):
        super().__init__()
        self.__dict__["original"] = quantizer  # put back after reconstruction; not a child (its state is not ours)
        shape = _channel_shape(weight)
        self.register_buffer("scale", quantizer.scale.detach().reshape(shape).clone())
        self.register_buffer("zero_point", quantizer.zero_point.detach().float().reshape(shape).clone())
        self.quant_min, self.quant_max = quantizer.quant_min, quantizer.quant_max
        scaled = weight.detach() / self.scale
        self.register_buffer("floor", torch.floor(scaled))
        rest = (scaled - self.floor).clamp(0, 1 - 1e-6)
        self.v = nn.Parameter(-torch.log((ZETA - GAMMA) / (rest - GAMMA) - 1))  # h(v) == rest
        self.hard = False

    def h(self):
        return torch.clamp(torch.sigmoid(self.v) * (ZETA - GAMMA) + GAMMA, 0, 1)

    def forward(self, _weight):
        up = (self.v >= 0).to(self.floor.dtype) if self.hard else self.h()
        q = torch.clamp(self.floor + up + self.zero_point, self.quant_min, self.quant_max)
        return (q - self.zero_point) * self.scale

    def regulariser(self, beta):
        return (1 - (2 * self.h() - 1).abs().pow(beta)).sum()


class ReconActivation(nn.Module):
    """Stands in for a layer's input quantizer during reconstruction: QDrop's random drop and,
    with ``learn_scale``, a trained scale (written back by :meth:`restore`)."""

    def __init__(self, quantizer, drop_prob, learn_scale):
        super().__init__()
        self.quantizer, self.drop_prob = quantizer, drop_prob
        self.scale = nn.Parameter(quantizer.scale.detach().clone()) if learn_scale else None

    def forward(self, x):
        q = self.quantizer
        if self.scale is None:
            out = q(x)
        else:
            grad_factor = 1.0 / float(x.numel() * q.quant_max) ** 0.5
            out = torch._fake_quantize_learnable_per_tensor_affine(
                x.float(), self.scale, q.zero_point.float(), q.quant_min, q.quant_max, grad_factor).to(x.dtype)
        if self.drop_prob > 0:
            out = torch.where(torch.rand_like(x) < self.drop_prob, x, out)
        return out

    @torch.no_grad()
    def restore(self):
        if self.scale is not None:
            self.quantizer.scale.copy_(self.scale.abs().clamp(min=torch.finfo(torch.float32).eps))
        return self.quantizer


def reconstruction_units(model, algorithm):
    """Module paths reconstructed one at a time, in the net's order: every quantized layer
    (adaround), or blocks (brecq, qdrop): the smallest modules that are not plain containers and
    hold at most MAX_BLOCK_LAYERS quantized layers (a residual block, an FPN, a head tower)."""
    if algorithm == "adaround":
        return [p for p, m in model.named_modules() if is_quant_layer(m)]
    units = []

    def visit(module, path, top):
        count = sum(is_quant_layer(m) for m in module.modules())
        if not count:
            return
        container = isinstance(module, (nn.Sequential, nn.ModuleList, nn.ModuleDict))
        if is_quant_layer(module) or not (top or container or count > MAX_BLOCK_LAYERS):
            units.append(path)
            return
        for name, child in module.named_children():
            visit(child, f"{path}.{name}" if path else name, False)

    visit(model, "", True)
    return units


def _map_tensors(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(v, fn) for v in value) if not hasattr(value, "_fields") else \
            type(value)(*(_map_tensors(v, fn) for v in value))
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


@torch.no_grad()
def capture(model, path, batches, run):
    """Every call of ``model``'s module ``path`` over ``batches``: [(args, kwargs, output)], detached."""
    module = model.get_submodule(path)
    calls = []

    def hook(_m, args, kwargs, output):
        calls.append(tuple(_map_tensors(v, lambda t: t.detach().clone()) for v in (args, kwargs, output)))

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        for batch in batches:
            run(model, batch)
    finally:
        handle.remove()
    return calls


def output_error(out, target):
    """UP's (MQBench's) reconstruction loss: squared error summed over channels, averaged over the rest."""
    total = 0.0
    for o, t in zip(_tensors(out), _tensors(target)):
        err = (o.float() - t.float()).pow(2)
        total = total + (err.sum(1).mean() if err.dim() > 1 else err.mean())
    return total


def beta_at(step, ptq):
    """The regulariser's exponent: beta[0] through the warm-up, then linearly down to beta[1]."""
    start = ptq["warm_up"] * ptq["iterations"]
    if step < start:
        return ptq["beta"][0]
    rel = (step - start) / max(1.0, ptq["iterations"] - start)
    return ptq["beta"][1] + (ptq["beta"][0] - ptq["beta"][1]) * max(0.0, 1 - rel)


def reconstruct_unit(unit, quant_calls, float_calls, ptq, iterations, generator):
    """Learn the rounding of every quantized layer in ``unit`` (in place); returns (error before, after)."""
    layers = [m for m in unit.modules() if is_quant_layer(m)]
    frozen = [(p, p.requires_grad) for p in unit.parameters()]
    for p, _ in frozen:
        p.requires_grad_(False)
    rounders, activations = [], []
    learn_scale = ptq["scale_lr"] > 0
    for layer in layers:
        layer.weight_quant = AdaRoundWeight(layer.weight_quant, layer.weight)
        rounders.append(layer.weight_quant)
        learn = learn_scale and not layer.input_quant.scheme["pot_scale"]  # a learned scale leaves the powers of two
        layer.input_quant = ReconActivation(layer.input_quant, 0.0, learn)
        activations.append(layer.input_quant)
    optimizer = torch.optim.Adam([r.v for r in rounders], lr=ptq["lr"])
    scales = [a.scale for a in activations if a.scale is not None]
    scale_optimizer = torch.optim.Adam(scales, lr=ptq["scale_lr"]) if scales else None
    drop = ptq["drop_prob"]

    def error():
        with torch.no_grad():
            return sum(float(output_error(unit(*a, **k), t)) for (a, k, _), (_, _, t) in zip(quant_calls, float_calls)) \
                / len(quant_calls)

    for r in rounders:
        r.hard = True
    before = error()
    for r in rounders:
        r.hard = False
    for a in activations:
        a.drop_prob = drop
    warm = ptq["warm_up"] * iterations
    schedule = dict(ptq, iterations=iterations)
    for step in range(iterations):
        i = int(torch.randint(len(quant_calls), (1,), generator=generator))
        (args, kwargs, _), (float_args, _, target) = quant_calls[i], float_calls[i]
        if drop > 0:  # QDrop: each input element from the float net with probability drop_prob
            args = tuple(_mix(a, f, drop) for a, f in zip(args, float_args))
        loss = output_error(unit(*args, **kwargs), target)
        if step >= warm:
            beta = beta_at(step, schedule)
            loss = loss + ptq["rounding_weight"] * sum(r.regulariser(beta) for r in rounders)
        optimizer.zero_grad(set_to_none=True)
        if scale_optimizer is not None:
            scale_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if scale_optimizer is not None:
            scale_optimizer.step()
    for a in activations:
        a.drop_prob = 0.0
    for r in rounders:
        r.hard = True
    after = error()
    with torch.no_grad():
        for layer, rounder, activation in zip(layers, rounders, activations):
            layer.weight.copy_(rounder(layer.weight))  # onto the grid: the weight quantizer keeps it as it is
            layer.weight_quant = rounder.original
            layer.input_quant = activation.restore()
    for p, flag in frozen:
        p.requires_grad_(flag)
    return before, after


def _mix(quantized, float_value, drop):
    if isinstance(quantized, torch.Tensor) and isinstance(float_value, torch.Tensor) and \
            quantized.shape == float_value.shape and quantized.is_floating_point():
        return torch.where(torch.rand_like(quantized) < drop, float_value, quantized)
    return quantized
