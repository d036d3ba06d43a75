"""The ``quant.ptq`` section (post-training quantization: calibration, then weight rounding
learned by reconstruction; up_trainer/quant/reconstruct.py) and ``quant.layer_bits``. No torch
import here.

::

    quant:
      mode: ptq
      backend: academic
      weight: {bits: 2, symmetric: false, observer: mse}
      activation: {bits: 4, symmetric: false, observer: ema_mse}
      layer_bits: {backbone.layer0.0: 8}   # modules whose layers keep more bits (the first conv)
      ptq:
        algorithm: qdrop          # adaround (layer by layer) | brecq (block by block) | qdrop
        calibration_batches: 8    # train batches for ranges and reconstruction
        iterations: 20000         # per layer (adaround) or block (brecq, qdrop)
        rounding_weight: 0.005    # weight of the rounding regulariser
        beta: [20, 2]             # its exponent, annealed from the first to the second
        warm_up: 0.2              # share of the iterations before the regulariser counts
        drop_prob: 0.5            # QDrop: chance an activation is left unquantized (qdrop: 0.5, else 0)
        scale_lr: 4.0e-5          # Adam rate of the activation scales (0: kept as calibrated)
        lr: 1.0e-3                # Adam rate of the rounding variables
"""
from ..errors import ConfigError, did_you_mean, join_path

ALGORITHMS = ("adaround", "brecq", "qdrop")
PTQ_KEYS = ("algorithm", "calibration_batches", "iterations", "rounding_weight", "beta", "warm_up", "drop_prob",
            "scale_lr", "lr")
DEFAULTS = {"algorithm": "adaround", "calibration_batches": 8, "iterations": 20000, "rounding_weight": 0.01,
            "beta": [20, 2], "warm_up": 0.2, "scale_lr": 0.0, "lr": 1.0e-3}


def _number(value):
    return not isinstance(value, bool) and isinstance(value, (int, float))


def check_value(key, value, path):
    """One ``quant.ptq`` value checked; ``path`` names it (UP's key for a UP file)."""
    if key == "algorithm":
        if value not in ALGORITHMS:
            raise ConfigError(path, f"{value!r} is not one of {', '.join(ALGORITHMS)}",
                              did_you_mean(str(value), ALGORITHMS) or None)
    elif key in ("calibration_batches", "iterations"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(path, f"expected an integer >= 1, got {value!r}")
    elif key == "beta":
        if not isinstance(value, list) or len(value) != 2 or not all(_number(b) and b > 0 for b in value) \
                or value[0] < value[1]:
            raise ConfigError(path, f"expected [start, end] with start >= end > 0, got {value!r}")
    elif key in ("warm_up", "drop_prob"):
        if not _number(value) or not 0 <= value <= 1 or (key == "warm_up" and value == 1):
            raise ConfigError(path, f"expected a number in [0, {'1)' if key == 'warm_up' else '1]'}, got {value!r}")
    elif key in ("rounding_weight", "scale_lr") and (not _number(value) or value < 0):
        raise ConfigError(path, f"expected a number >= 0, got {value!r}")
    elif key == "lr" and (not _number(value) or value <= 0):
        raise ConfigError(path, f"expected a number > 0, got {value!r}")


def ptq_spec(section, mode):
    """The checked ``quant.ptq`` with defaults filled in (None in qat mode)."""
    if mode != "ptq":
        if section is not None:
            raise ConfigError("quant.ptq", "is read in mode: ptq only", "set quant.mode: ptq, or drop the section")
        return None
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise ConfigError("quant.ptq", f"expected a mapping, got {type(section).__name__}")
    out = dict(DEFAULTS)
    for key, value in section.items():
        path = join_path("quant.ptq", key)
        if key not in PTQ_KEYS:
            raise ConfigError(path, "unknown key", did_you_mean(str(key), PTQ_KEYS) or f"known: {', '.join(PTQ_KEYS)}")
        check_value(key, value, path)
        out[key] = list(value) if key == "beta" else value
    out.setdefault("drop_prob", 0.5 if out["algorithm"] == "qdrop" else 0.0)
    return out


def layer_bits_spec(section):
    """``quant.layer_bits``: module path -> bit width for its layers' weights and inputs."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError("quant.layer_bits", f"expected a mapping of module path to bits, got {section!r}")
    for path, bits in section.items():
        if not isinstance(path, str) or not path:
            raise ConfigError("quant.layer_bits", f"expected module paths as keys, got {path!r}")
        if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
            raise ConfigError(join_path("quant.layer_bits", path), f"expected an integer from 2 to 8, got {bits!r}")
    return dict(section)
