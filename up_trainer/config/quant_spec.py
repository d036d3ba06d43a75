"""The native ``quant`` section, checked and filled in when the config is resolved (no torch
import here; the quantizers themselves are up_trainer/quant/).

::

    quant:
      mode: qat              # qat: fake-quant inserted, trained as a normal run; ptq: calibrated and
                             # its rounding reconstructed from a trained net (quant/reconstruct.py)
      backend: tensorrt      # tensorrt | vitis | academic: the scheme defaults below
      weight: {bits: 8, observer: minmax, fake_quantize: fixed}
      activation: {bits: 8, observer: ema_minmax, fake_quantize: fixed, ema_ratio: 0.9}
      skip: []               # module paths kept in float (e.g. [backbone.conv1])
      layer_bits: {}         # module path -> bits for its layers (e.g. {backbone.conv1: 8})
      ptq: {...}             # mode: ptq only: calibration and reconstruction (config/ptq_spec.py)

A backend fixes what its deployment engine can run: ``tensorrt`` symmetric int8, weights per
output channel, activations per tensor (zero point 0); ``vitis`` (Xilinx DPU) symmetric int8
per tensor with power-of-two scales for both; ``academic`` any bit width, each of
``symmetric`` / ``per_channel`` / ``pot_scale`` free (UP's academic backend, for research runs;
only 8-bit schemes export as ONNX QDQ). Under ``weight`` / ``activation`` a key the backend
fixes may be given only with the backend's value.
"""
from ..errors import ConfigError, did_you_mean, join_path

MODES = ("qat", "ptq")
OBSERVERS = ("minmax", "ema_minmax", "mse", "ema_mse")
FAKE_QUANTIZES = ("fixed", "learnable")
SECTION_KEYS = ("mode", "backend", "weight", "activation", "skip", "layer_bits", "ptq")
SCHEME_KEYS = ("bits", "symmetric", "per_channel", "pot_scale", "observer", "fake_quantize", "ema_ratio", "p")
# written by the resolution itself (each quantizer carries it into the export record); read back as given
RESOLVED_KEYS = ("backend",)

# What each backend's engine runs: fixed keys per tensor kind; the rest are defaults.
BACKENDS = {
    "tensorrt": {"weight": {"bits": 8, "symmetric": True, "per_channel": True, "pot_scale": False},
                 "activation": {"bits": 8, "symmetric": True, "per_channel": False, "pot_scale": False}},
    "vitis": {"weight": {"bits": 8, "symmetric": True, "per_channel": False, "pot_scale": True},
              "activation": {"bits": 8, "symmetric": True, "per_channel": False, "pot_scale": True}},
    "academic": {"weight": {}, "activation": {}},
}
DEFAULTS = {
    "weight": {"bits": 8, "symmetric": True, "per_channel": True, "pot_scale": False, "observer": "minmax",
               "fake_quantize": "fixed", "ema_ratio": 0.9, "p": 2.0},
    "activation": {"bits": 8, "symmetric": True, "per_channel": False, "pot_scale": False,
                   "observer": "ema_minmax", "fake_quantize": "fixed", "ema_ratio": 0.9, "p": 2.0},
}


def _scheme(kind, given, backend):
    path = join_path("quant", kind)
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ConfigError(path, f"expected a mapping, got {type(given).__name__}")
    fixed = BACKENDS[backend][kind]
    out = dict(DEFAULTS[kind])
    out.update(fixed)
    for key, value in given.items():
        kpath = join_path(path, key)
        if key in RESOLVED_KEYS and value == backend:
            continue
        if key not in SCHEME_KEYS:
            raise ConfigError(kpath, "unknown key", did_you_mean(key, SCHEME_KEYS) or f"known: {', '.join(SCHEME_KEYS)}")
        if key in ("symmetric", "per_channel", "pot_scale"):
            if not isinstance(value, bool):
                raise ConfigError(kpath, f"expected true or false, got {value!r}")
        elif key == "bits":
            if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 8:
                raise ConfigError(kpath, f"expected an integer from 2 to 8, got {value!r}")
        elif key in ("ema_ratio", "p"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not (0 <= value < 1 if key == "ema_ratio" else value > 0):
                raise ConfigError(kpath, f"expected a number {'in [0, 1)' if key == 'ema_ratio' else '> 0'}, "
                                  f"got {value!r}")
        else:
            choices = OBSERVERS if key == "observer" else FAKE_QUANTIZES
            if value not in choices:
                raise ConfigError(kpath, f"{value!r} is not one of {', '.join(choices)}",
                                  did_you_mean(str(value), choices) or None)
        if key in fixed and value != fixed[key]:
            raise ConfigError(kpath, f"backend {backend} runs {key}: {fixed[key]}, got {value!r}",
                              "drop the key, or use backend: academic")
        out[key] = value
    if kind == "weight" and out["observer"] in ("ema_minmax", "ema_mse"):
        raise ConfigError(join_path(path, "observer"), f"{out['observer']} averages ranges over batches; a weight's "
                          "range is its current value", "use minmax or mse for weights")
    if kind == "activation" and out["per_channel"]:
        raise ConfigError(join_path(path, "per_channel"), "activations are quantized per tensor (one scale for a "
                          "layer's input)", "set per_channel: false")
    if out["pot_scale"] and not out["symmetric"]:
        raise ConfigError(join_path(path, "pot_scale"), "power-of-two scales need a symmetric scheme",
                          "set symmetric: true")
    return out


def quant_spec(section):
    """The checked ``quant`` section with every default filled in; None when absent."""
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ConfigError("quant", f"expected a mapping, got {type(section).__name__}")
    for key in section:
        if key not in SECTION_KEYS:
            raise ConfigError(join_path("quant", key), "unknown key",
                              did_you_mean(str(key), SECTION_KEYS) or f"known: {', '.join(SECTION_KEYS)}")
    mode = section.get("mode", "qat")
    if mode not in MODES:
        raise ConfigError("quant.mode", f"{mode!r} is not one of {', '.join(MODES)}")
    backend = section.get("backend", "tensorrt")
    if backend not in BACKENDS:
        raise ConfigError("quant.backend", f"{backend!r} is not one of {', '.join(BACKENDS)}",
                          did_you_mean(str(backend), BACKENDS) or None)
    skip = section.get("skip") or []
    if not isinstance(skip, list) or not all(isinstance(s, str) and s for s in skip):
        raise ConfigError("quant.skip", f"expected a list of module paths, got {skip!r}")
    weight, activation = (_scheme(kind, section.get(kind), backend) for kind in ("weight", "activation"))
    weight["backend"] = activation["backend"] = backend  # carried by each quantizer into the export record
    from .ptq_spec import layer_bits_spec, ptq_spec  # post-training quantization's settings (quant/reconstruct.py)

    layer_bits = layer_bits_spec(section.get("layer_bits"))
    for path, bits in layer_bits.items():
        fixed = BACKENDS[backend]["weight"].get("bits")
        if fixed is not None and bits != fixed:
            raise ConfigError(join_path("quant.layer_bits", path), f"backend {backend} runs bits: {fixed}, got {bits}",
                              "use backend: academic")
    return {"mode": mode, "backend": backend, "weight": weight, "activation": activation, "skip": list(skip),
            "layer_bits": layer_bits, "ptq": ptq_spec(section.get("ptq"), mode)}


def exports_as_qdq(spec):
    """ONNX's QuantizeLinear holds 8-bit integers only."""
    return spec["weight"]["bits"] == 8 and spec["activation"]["bits"] == 8
