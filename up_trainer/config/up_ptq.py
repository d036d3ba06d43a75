"""UP's post-training quantization keys (``quant_type: ptq``: ``cali_batch_size``, ``ptq``,
``tricks``, ``resume_quant``) translated into the native ``quant.ptq`` and ``quant.layer_bits``
(config/ptq_spec.py). No torch import here.

UP hands ``ptq`` to MQBench's reconstruction: ``pattern`` layer (AdaRound) or block (BRECQ, QDrop
when ``prob`` < 1, prob being the chance an activation IS quantized), ``max_count`` iterations per
unit, ``weight`` of the rounding regulariser, ``b_range`` its annealed exponent, ``warm_up``,
``scale_lr`` for the activation scales, ``round_mode`` (the rectified sigmoid only), ``keep_gpu``
(where the cached inputs live). ``tricks.special`` / ``tricks.bit`` keep some layers at more bits.
"""
from ..errors import ConfigError, did_you_mean, join_path
from .ptq_spec import check_value as check_ptq_value

PTQ_KEYS = ("pattern", "scale_lr", "warm_up", "weight", "max_count", "b_range", "keep_gpu", "round_mode", "prob")
RENAMED = {"scale_lr": "scale_lr", "warm_up": "warm_up", "weight": "rounding_weight", "max_count": "iterations",
           "b_range": "beta"}
TRICK_KEYS = ("special", "bit", "head", "tail")


def _ptq(section, notes):
    if not isinstance(section, dict):
        raise ConfigError("quant.ptq", f"expected a mapping, got {type(section).__name__}")
    out = {}
    for key, value in section.items():
        path = join_path("quant.ptq", key)
        if key not in PTQ_KEYS:
            raise ConfigError(path, "is not read by UP's ptq reconstruction",
                              did_you_mean(str(key), PTQ_KEYS) or f"known: {', '.join(PTQ_KEYS)}")
        if key in RENAMED:
            check_ptq_value(RENAMED[key], value, path)  # named by UP's key
            out[RENAMED[key]] = value
        elif key == "round_mode" and value != "learned_hard_sigmoid":
            raise ConfigError(path, f"UP's round mode {value!r} is not built",
                              "learned_hard_sigmoid (AdaRound's rectified sigmoid)")
        elif key == "keep_gpu":
            notes.append(f"{path}: recorded (cached inputs stay on the run's device)")
        elif key == "prob":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ConfigError(path, f"expected the chance an activation is quantized, in [0, 1], got {value!r}")
            out["drop_prob"] = round(1.0 - value, 12)
    pattern = section.get("pattern", "layer")
    if pattern not in ("layer", "block"):
        raise ConfigError("quant.ptq.pattern", f"{pattern!r} is not one of layer, block (UP)")
    drops = out.get("drop_prob", 0.0) > 0
    out["algorithm"] = "adaround" if pattern == "layer" else "qdrop" if drops else "brecq"
    out.setdefault("drop_prob", 0.0)
    return out


def _tricks(cfg, tricks, native, notes):
    if not isinstance(tricks, dict):
        raise ConfigError("quant.tricks", f"expected a mapping, got {type(tricks).__name__}")
    for key in tricks:
        if key not in TRICK_KEYS:
            raise ConfigError(join_path("quant.tricks", key), "is not read by UP's quant runner",
                              did_you_mean(str(key), TRICK_KEYS) or f"known: {', '.join(TRICK_KEYS)}")
    for key in ("head", "tail"):
        if key in tricks:
            notes.append(f"quant.tricks.{key}: recorded (UP's quant runner reads only tricks.special and tricks.bit)")
    special = tricks.get("special") or []
    if not isinstance(special, list) or not all(isinstance(p, str) for p in special):
        raise ConfigError("quant.tricks.special", f"expected a list of module paths, got {special!r}")
    bit = tricks.get("bit", 8)
    if isinstance(bit, bool) or not isinstance(bit, int) or not 2 <= bit <= 8:
        raise ConfigError("quant.tricks.bit", f"expected an integer from 2 to 8, got {bit!r}")
    if special:
        native["layer_bits"] = {_module_path(cfg, p, notes): tricks.get("bit", 8) for p in special}


# UP's ResNet stem is a Sequential ``layer0`` (conv, bn); ours has torchvision's names. The same
# renaming as tasks/up_nets/keymap.py's for weights (a layer below config, so not imported here).
UP_STEM = {"layer0.0": "conv1", "layer0.1": "bn1"}


def _module_path(cfg, path, notes):
    """UP's module path (``backbone.layer0.0``) as ours (``backbone.conv1``) when the entry is a ResNet."""
    entry, _, rest = path.partition(".")
    nets = cfg.get("net") if isinstance(cfg.get("net"), list) else []
    kind = next((n.get("type") for n in nets if isinstance(n, dict) and n.get("name") == entry), None)
    if not (isinstance(kind, str) and kind.startswith("resnet")):
        return path
    for up_name, ours in UP_STEM.items():
        if rest == up_name or rest.startswith(up_name + "."):
            renamed = f"{entry}.{ours}{rest[len(up_name):]}"
            notes.append(f"quant.tricks.special: UP's {path} is {renamed} here")
            return renamed
    return path


def translate_ptq(cfg, section, native, notes):
    """UP's PTQ keys of ``section`` into ``native`` (the native quant section being built)."""
    native["ptq"] = _ptq(section.get("ptq") or {}, notes)
    if "cali_batch_size" in section:
        check_ptq_value("calibration_batches", section["cali_batch_size"], "quant.cali_batch_size")
        native["ptq"]["calibration_batches"] = section["cali_batch_size"]
    _tricks(cfg, section.get("tricks") or {}, native, notes)
    if "resume_quant" in section:
        notes.append("quant.resume_quant: recorded (a PTQ run starts from float weights; its checkpoint "
                     "ckpt_ptq.pth is evaluated with up eval)")
    notes.append(f"quant.ptq: UP's reconstruction read as {native['ptq']['algorithm']} (docs/quant.rst)")
