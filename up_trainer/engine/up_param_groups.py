"""UP's parameter-group rules: ``optimizer.pconfig`` and ``optimizer.register_type: yolov5``.

pconfig, as UP writes it (values are absolute, not multipliers)::

    pconfig:
      bn_w: {type: weight, kwargs: {weight_decay: 0.0}}   # BatchNorm2d weights
      ln_b: {type: bias, kwargs: {weight_decay: 0.0}}     # LayerNorm biases
      linear_b: {type: bias, kwargs: {lr: 0.2}}
      nodecay: [ndim_is1, relative_position_bias_table]   # weight_decay 0 by name or for 1-d tensors
      layer_decay: {type: vit_base, value: 0.65, base_lr: 0.002}   # ViT layer-wise lr (up_layer_decay.py)

Keys name a module kind (``bn`` = BatchNorm2d, ``ln`` = LayerNorm, ``linear`` = Linear); ``type``
picks the weight or the bias, as in UP. ``nodecay`` applies first and a pconfig entry then
overrides it. A ``nodecay`` inside an entry (as some UP files have it) is not read, as in UP,
with a warning. The shorthand ``bn_w: {weight_decay: 0.0}`` (no ``type``/``kwargs``) is accepted
too, where the key's ``_w`` / ``_b`` picks the tensor; it also knows ``conv_b``, ``conv_dw_w``,
``conv_dw_b``, ``conv_dense_w``, ``conv_dense_b``.

register_type yolov5: four groups, always in this order (UP's YOLOv5 optimizer):
``[0]`` BatchNorm2d weights (weight_decay 0), ``[1]`` other modules' weights (the optimizer's
weight_decay), ``[2]`` every bias (weight_decay 0), ``[3]`` anything else (optimizer defaults).
"""
import logging

from torch import nn

from ..errors import ConfigError, did_you_mean

log = logging.getLogger("up")

UP_KINDS = {"bn": nn.BatchNorm2d, "ln": nn.LayerNorm, "linear": nn.Linear}
SHORTHAND_KEYS = ("bn_w", "bn_b", "ln_w", "ln_b", "conv_b", "conv_dw_w", "conv_dw_b", "conv_dense_w",
                  "conv_dense_b", "linear_w", "linear_b")
PCONFIG_KEYS = SHORTHAND_KEYS + ("nodecay", "layer_decay")


def _entry(key, val, path):
    """(module kind, 'weight'|'bias', group kwargs) of one pconfig entry."""
    p = f"{path}.{key}"
    if not isinstance(val, dict) or "params" in val:
        raise ConfigError(p, "expected {type: weight|bias, kwargs: {weight_decay: 0.0}}")
    if "type" in val or "kwargs" in val:  # UP's own form
        if "nodecay" in val:  # some of UP's own files indent nodecay one level too deep; UP never reads it there
            log.warning("%s.nodecay: not read inside a pconfig entry (UP ignores it there too); it belongs one "
                        "level up, next to %s", p, key)
        extra = set(val) - {"type", "kwargs", "nodecay"}
        if extra:
            raise ConfigError(f"{p}.{sorted(extra)[0]}", "unknown key", "UP form is {type, kwargs}")
        if val.get("type") not in ("weight", "bias"):
            raise ConfigError(f"{p}.type", f"expected weight or bias, got {val.get('type')!r}")
        kind = key.rsplit("_", 1)[0]
        if kind not in UP_KINDS:
            raise ConfigError(p, f"UP's pconfig has no {kind!r} kind", f"use one of {', '.join(UP_KINDS)}")
        kwargs = val.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise ConfigError(f"{p}.kwargs", "expected a mapping like {weight_decay: 0.0}")
        return kind, val["type"], dict(kwargs)
    return key, None, dict(val)


def pconfig_settings(model, named, cfg, path, base_lr=None):
    if not isinstance(cfg, dict):
        raise ConfigError(path, f"expected a mapping, got {type(cfg).__name__}")
    entries = {}
    for key, val in cfg.items():
        if key not in PCONFIG_KEYS:
            raise ConfigError(f"{path}.{key}", "unknown key", did_you_mean(key, PCONFIG_KEYS)
                              or f"known: {', '.join(PCONFIG_KEYS)}")
        if key == "layer_decay":
            continue
        if key == "nodecay":
            if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
                raise ConfigError(f"{path}.nodecay", "expected a list of name substrings (or ndim_is1)")
            continue
        entries[key] = _entry(key, val, path)
    claims = {}  # parameter name -> [(pconfig key, kwargs)] in pconfig order
    for mname, m in model.named_modules():
        prefix = f"{mname}." if mname else ""
        for key, (kind, tensor, kwargs) in entries.items():
            attr = tensor or _shorthand_attr(m, key)
            if attr is None or (tensor is not None and not isinstance(m, UP_KINDS[kind])):
                continue
            if isinstance(getattr(m, attr, None), nn.Parameter):
                claims.setdefault(prefix + attr, []).append((key, kwargs))
    nodecay = cfg.get("nodecay") or []
    layer_lrs = {}
    if "layer_decay" in cfg:
        from .up_layer_decay import layer_decay_lrs

        layer_lrs = layer_decay_lrs(model, named, cfg["layer_decay"], base_lr, f"{path}.layer_decay")
    out = {}
    for name, p in named:
        opts, tags = {}, []
        if name in layer_lrs:  # UP's order: the layer's lr, then nodecay, then the entries
            opts["lr"], tags = layer_lrs[name][1], [f"layer{layer_lrs[name][0]}"]
        for rule in nodecay:
            if (rule == "ndim_is1" and p.ndim == 1) or (rule != "ndim_is1" and rule in name):
                opts["weight_decay"] = 0.0
                tags.append("nodecay")
                break
        for key, kwargs in claims.get(name, []):
            opts.update(kwargs)
            tags.append(key)
        out[name] = (opts, "/".join(tags) if tags else "default")
    return out


def _shorthand_attr(m, key):
    """The tensor a shorthand key (``bn_w: {weight_decay: 0}``) claims on module ``m``, if any."""
    kind, suffix = key.rsplit("_", 1)
    attr = "weight" if suffix == "w" else "bias"
    if kind == "bn":
        ok = isinstance(m, nn.modules.batchnorm._BatchNorm)
    elif kind == "ln":
        ok = isinstance(m, nn.LayerNorm)
    elif kind == "linear":
        ok = isinstance(m, nn.Linear)
    elif kind == "conv_dw":
        ok = isinstance(m, nn.Conv2d) and m.groups == m.in_channels and m.groups > 1
    elif kind == "conv_dense":
        ok = isinstance(m, nn.Conv2d) and m.groups == 1
    else:  # conv_b: any convolution's bias
        ok = isinstance(m, nn.Conv2d)
    return attr if ok else None


def yolov5_param_groups(model, optimizer_kwargs, path):
    if "weight_decay" not in optimizer_kwargs:
        raise ConfigError(f"{path}.weight_decay", "register_type yolov5 needs the optimizer's weight_decay")
    wd = optimizer_kwargs["weight_decay"]
    groups = [{"params": [], "weight_decay": 0.0}, {"params": [], "weight_decay": wd},
              {"params": [], "weight_decay": 0.0}, {"params": []}]
    placed = set()

    def put(i, p):
        if p.requires_grad and id(p) not in placed:
            placed.add(id(p))
            groups[i]["params"].append(p)

    for _, m in model.named_modules():
        if isinstance(getattr(m, "bias", None), nn.Parameter):
            put(2, m.bias)
        if isinstance(m, nn.BatchNorm2d):
            put(0, m.weight)
        elif isinstance(getattr(m, "weight", None), nn.Parameter):
            put(1, m.weight)
    for _, p in model.named_parameters():
        put(3, p)
    return groups


def yolov5_except_param_groups(model, optimizer_kwargs, path):
    """UP's ``yolov5_except`` (its equalized-focal-loss YOLOX recipes): YOLOv5's groups, except
    that the modules named in ``except_keys`` (popped from the kwargs) keep their bias with their
    weight, under weight decay. As UP, a parameter that is neither a module's ``weight`` nor its
    ``bias`` is in no group (not trained)."""
    except_keys = optimizer_kwargs.pop("except_keys", [])
    if not isinstance(except_keys, list) or not all(isinstance(k, str) for k in except_keys):
        raise ConfigError(f"{path}.except_keys", f"expected a list of module names, got {except_keys!r}")
    if "weight_decay" not in optimizer_kwargs:
        raise ConfigError(f"{path}.weight_decay", "register_type yolov5_except needs the optimizer's weight_decay")
    modules = dict(model.named_modules())
    for key in except_keys:
        if key not in modules:
            raise ConfigError(f"{path}.except_keys", f"the model has no module {key!r}")
        if not isinstance(getattr(modules[key], "weight", None), nn.Parameter):
            raise ConfigError(f"{path}.except_keys", f"module {key!r} has no weight")
    groups = [{"params": [], "weight_decay": 0.0}, {"params": [], "weight_decay": optimizer_kwargs["weight_decay"]},
              {"params": [], "weight_decay": 0.0}]
    placed = set()

    def put(i, p):
        if p.requires_grad and id(p) not in placed:
            placed.add(id(p))
            groups[i]["params"].append(p)

    for name, m in modules.items():
        bias = getattr(m, "bias", None)
        if isinstance(bias, nn.Parameter) and name not in except_keys:
            put(2, bias)
        if isinstance(m, nn.BatchNorm2d):
            put(0, m.weight)
        elif isinstance(getattr(m, "weight", None), nn.Parameter):
            put(1, m.weight)
            if name in except_keys and isinstance(bias, nn.Parameter):
                put(1, bias)
    return groups


SPECIAL_GROUP = "special_param_group"  # the param-group key naming the name substring that made it


def special_group_settings(named, entries, path):
    """UP's ``optimizer.special_param_group: [{key, <group kwargs>}, ...]``: a parameter whose
    name holds an entry's ``key`` joins that entry's group (the first that matches), with the
    entry's other keys as the group's settings; the rest form the default group. The group
    remembers its key (``SimSiamScheduler`` keeps those groups' lr fixed)."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(path, "expected a list of {key: <name substring>, ...group kwargs}")
    for i, entry in enumerate(entries):
        if not isinstance(entry.get("key"), str) or not entry["key"]:
            raise ConfigError(f"{path}[{i}].key", "required name substring is missing")
        if not any(entry["key"] in name for name, _ in named):
            raise ConfigError(f"{path}[{i}].key", f"{entry['key']!r} is in no trainable parameter's name")
    out = {}
    for name, _ in named:
        entry = next((e for e in entries if e["key"] in name), None)
        if entry is None:
            out[name] = ({}, "default")
        else:
            opts = {k: v for k, v in entry.items() if k != "key"}
            opts[SPECIAL_GROUP] = entry["key"]
            out[name] = (opts, f"special:{entry['key']}")
    return out

