"""Fake quantization inserted into a built net: every ``nn.Conv2d`` and ``nn.Linear`` becomes,
in place, its Quant subclass with an input and a weight quantizer (fake_quant.py).

In place (the module's class is swapped, two child modules added) rather than rebuilt: the
parameters stay the same objects under the same names, so an fp32 checkpoint still loads as
``pretrain_model``, forward hooks and memory checkpointing still find their modules, and the
optimizer and EMA see the one set of parameters. This is the placement TensorRT's explicit
quantization expects (a Q/DQ pair on each convolution's and matrix product's input and weight);
residual additions, pooling and activations stay in float and are fused by the engine.
"""
import logging

from torch import nn

from ..errors import ConfigError, did_you_mean, join_path
from .fake_quant import QUANT_CLASSES, FakeQuantizer

log = logging.getLogger("up")


def quantize_model(model, spec):
    """Wrap ``model``'s conv and linear layers per ``spec`` (the checked quant section);
    returns the list of wrapped module paths. Layers of a subclass (their own forward) and
    those under ``spec['skip']`` stay in float."""
    names = dict(model.named_modules())
    for i, path in enumerate(spec["skip"]):
        if path not in names:
            raise ConfigError(join_path("quant.skip", i), f"the net has no module {path!r}",
                              did_you_mean(path, [n for n in names if n]) or None)
    skipped = tuple(spec["skip"])
    layer_bits = _layer_bits(spec, names)
    wrapped, other = [], 0
    for path, module in names.items():
        if any(path == s or path.startswith(s + ".") for s in skipped):
            continue
        quant_class = QUANT_CLASSES.get(type(module))
        if quant_class is None:
            other += isinstance(module, (nn.Conv2d, nn.Linear))
            continue
        channels = module.weight.shape[0]
        bits = next((b for prefix, b in layer_bits if path == prefix or path.startswith(prefix + ".")), None)
        activation, weight = ((s if bits is None else dict(s, bits=bits)) for s in (spec["activation"], spec["weight"]))
        module.__class__ = quant_class
        module.add_module("input_quant", FakeQuantizer(activation, device=module.weight.device))
        module.add_module("weight_quant", FakeQuantizer(weight, channels, is_weight=True, device=module.weight.device))
        wrapped.append(path)
    if not wrapped:
        raise ConfigError("quant", "the net has no nn.Conv2d or nn.Linear layer to quantize")
    log.info("quant: %d conv/linear layers fake-quantized for %s (weights %s, activations %s)%s", len(wrapped),
             spec["backend"], describe(spec["weight"]), describe(spec["activation"]),
             f"; {other} subclassed layers left in float" if other else "")
    return wrapped


def _layer_bits(spec, names):
    """``quant.layer_bits`` as (module path, bits), checked against the net."""
    for path in spec.get("layer_bits", {}):
        if path not in names:
            raise ConfigError(join_path("quant.layer_bits", path), f"the net has no module {path!r}",
                              did_you_mean(path, [n for n in names if n]) or None)
    return list(spec.get("layer_bits", {}).items())


def describe(scheme):
    parts = [f"int{scheme['bits']}", "symmetric" if scheme["symmetric"] else "asymmetric",
             "per-channel" if scheme["per_channel"] else "per-tensor"]
    if scheme["pot_scale"]:
        parts.append("power-of-two scale")
    return " ".join(parts) + f", {scheme['observer']}, {scheme['fake_quantize']}"


def apply_quant(model, cfg):
    """The config's quant section applied to ``model`` (nothing when it has none)."""
    from ..config.quant_spec import quant_spec

    spec = quant_spec(cfg.get("quant"))
    if spec is None:
        return model
    quantize_model(model, spec)
    return model


def quantizer_state_keys(model):
    """The state-dict keys of every FakeQuantizer's ranges, scales and zero points."""
    return {f"{path}.{key}" if path else key for path, m in model.named_modules() if isinstance(m, FakeQuantizer)
            for key in m.state_dict()}


def is_quantized(model):
    return any(isinstance(m, FakeQuantizer) for m in model.modules())
