"""UP's ``pconfig.layer_decay``: layer-wise learning-rate decay for its ViT (MAE / BEiT fine-tuning).

UP's form::

    pconfig:
      nodecay: [ndim_is1, .bias]
      layer_decay: {type: vit_base, value: 0.65, base_lr: 0.002}

With ``depth`` encoder blocks, each parameter gets a layer id as UP assigns it: the patch
embedding, the class token and the position embedding 0, encoder block ``i`` (from 0) ``i + 1``,
anything else (the final LayerNorm, the head) ``depth``. Its group's lr is then
``base_lr * value ** (depth - layer_id)`` -- an absolute lr, not a multiplier of the optimizer's.
As in UP, the last block and the head share the factor 1 (UP counts ``depth`` layers, not
BEiT's ``depth + 1``). ``base_lr`` defaults to the optimizer's lr. The lr schedule then scales
every group's lr by the same factor, so the ratios between layers hold through training.
"""
from ..errors import ConfigError

LAYER_DECAY_KEYS = ("type", "value", "base_lr")


def _number(cfg, key, path):
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{path}.{key}", f"expected a number, got {v!r}")
    return float(v)


def read_layer_decay(cfg, base_lr, path):
    """(value, base_lr) of a checked ``layer_decay`` mapping."""
    if not isinstance(cfg, dict):
        raise ConfigError(path, "expected {type: vit_base, value: <decay in (0, 1]>, base_lr: <lr>}")
    for key in cfg:
        if key not in LAYER_DECAY_KEYS:
            raise ConfigError(f"{path}.{key}", "unknown key", f"known: {', '.join(LAYER_DECAY_KEYS)}")
    if cfg.get("type") != "vit_base":
        raise ConfigError(f"{path}.type", f"UP's layer decay has no type {cfg.get('type')!r}",
                          "use vit_base (the only one UP has)")
    if "value" not in cfg:
        raise ConfigError(f"{path}.value", "required decay factor is missing", "e.g. value: 0.65")
    value = _number(cfg, "value", path)
    if not 0 < value <= 1:
        raise ConfigError(f"{path}.value", f"must be in (0, 1], got {value:g}")
    if "base_lr" in cfg:
        base_lr = _number(cfg, "base_lr", path)
    elif base_lr is None:
        raise ConfigError(f"{path}.base_lr", "required when the optimizer has no lr")
    if not base_lr > 0:
        raise ConfigError(f"{path}.base_lr", f"must be > 0, got {base_lr:g}")
    return value, float(base_lr)


def _find_vit(named):
    """(name prefix, encoder block names in order) of the model's ViT, read from its parameter
    names: torchvision's VisionTransformer and UP's ViT trunk (tasks/up_nets/vit.py) both hold
    ``class_token``, ``conv_proj``, ``encoder.pos_embedding`` and ``encoder.layers.<block>``."""
    names = [n for n, _ in named]
    for name in names:
        if not name.endswith("class_token"):
            continue
        prefix = name[:-len("class_token")]
        if prefix + "encoder.pos_embedding" not in names:
            continue
        blocks = []
        for n in names:
            if n.startswith(prefix + "encoder.layers."):
                block = n[len(prefix + "encoder.layers."):].split(".", 1)[0]
                if block not in blocks:
                    blocks.append(block)
        if blocks:
            return prefix, blocks
    return None, None


def layer_decay_lrs(model, named, cfg, base_lr, path):
    """{parameter name: (layer id, lr)} for every trainable parameter."""
    value, base_lr = read_layer_decay(cfg, base_lr, path)
    prefix, blocks = _find_vit(list(model.named_parameters()))  # frozen ones too
    if prefix is None:
        raise ConfigError(f"{path}.type", "vit_base layer decay needs a ViT backbone (patch embedding, class "
                          "token, encoder blocks); this net has none", "use a vit_* / deit_* backbone, or "
                          "paramwise_cfg.decay_rate for ResNet / ConvNeXt")
    depth = len(blocks)
    stem = (f"{prefix}conv_proj.", f"{prefix}class_token", f"{prefix}encoder.pos_embedding")
    block_id = {f"{prefix}encoder.layers.{b}.": i + 1 for i, b in enumerate(blocks)}
    out = {}
    for name, _ in named:
        if any(name == s or name.startswith(s) for s in stem):
            layer = 0
        else:
            layer = next((i for b, i in block_id.items() if name.startswith(b)), depth)
        out[name] = (layer, base_lr * value ** (depth - layer))
    return out
