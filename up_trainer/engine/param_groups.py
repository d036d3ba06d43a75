"""Parameter groups for the optimizer: MMEngine ``paramwise_cfg`` and UP ``pconfig``.

Frozen parameters (requires_grad False) are always left out. Every trainable parameter gets
an lr / weight_decay from the rules below; parameters with equal settings share a group, and
groups keep the order of ``model.named_parameters()`` so that optimizer state dicts line up
across runs (resume matches groups by position).

paramwise_cfg (multipliers of the optimizer's lr / weight_decay)::

    no_decay_norm_bias: true        # shortcut: norm_decay_mult 0 and bias_decay_mult 0
    norm_decay_mult / bias_decay_mult / bias_lr_mult / dwconv_decay_mult / flat_decay_mult
    custom_keys: {pos_embed: {decay_mult: 0}, backbone.layer1: {lr_mult: 0.1}}
    decay_rate: 0.75, decay_type: layer_wise|stage_wise, num_layers: 12   # LR decay by depth

A parameter whose name contains a custom key takes that key's multipliers (the longest
matching key wins; ties go to the alphabetically first) and skips the norm/bias rules, as
in MMEngine. Layer-wise decay multiplies the lr by ``decay_rate ** (L - depth)``: 0 for the
stem/embeddings, L for the head (factor 1).
"""
import inspect
import logging

from torch import nn

from ..errors import ConfigError, did_you_mean

log = logging.getLogger("up")

MULT_KEYS = ("bias_lr_mult", "bias_decay_mult", "norm_decay_mult", "dwconv_decay_mult", "flat_decay_mult")
PARAMWISE_KEYS = MULT_KEYS + ("no_decay_norm_bias", "custom_keys", "decay_rate", "decay_type", "num_layers",
                              "bypass_duplicate")
NORM_TYPES = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm, nn.modules.instancenorm._InstanceNorm,
              nn.LocalResponseNorm)


def _default_of(optimizer_cls, key):
    if optimizer_cls is None:
        return None
    p = inspect.signature(optimizer_cls.__init__).parameters.get(key)
    return p.default if p is not None and isinstance(p.default, (int, float)) else None


def build_param_groups(model, optimizer_kwargs, paramwise_cfg, path, optimizer_cls=None, pconfig=None, special=None):
    """A list of ``{"params", "lr"?, "weight_decay"?}`` dicts; logs a short summary."""
    named = [(n, p) for n, p in model.named_parameters()]
    frozen = [n for n, p in named if not p.requires_grad]
    named = [(n, p) for n, p in named if p.requires_grad]
    if not named:
        raise ConfigError("net", "the model has no trainable parameters (all frozen)")
    base_lr = optimizer_kwargs.get("lr", _default_of(optimizer_cls, "lr"))
    base_wd = optimizer_kwargs.get("weight_decay", _default_of(optimizer_cls, "weight_decay"))
    if paramwise_cfg and pconfig:
        raise ConfigError(path, "give paramwise_cfg (MMEngine) or pconfig (UP), not both")
    if special is not None:
        from .up_param_groups import special_group_settings

        if pconfig or paramwise_cfg:
            raise ConfigError(path.rsplit(".", 1)[0] + ".special_param_group", "UP reads special_param_group only "
                              "without pconfig", "give one of them")
        settings = special_group_settings(named, special, path.rsplit(".", 1)[0] + ".special_param_group")
    elif pconfig:
        from .up_param_groups import pconfig_settings as _pconfig_settings

        settings = _pconfig_settings(model, named, pconfig, path.rsplit(".", 1)[0] + ".pconfig", base_lr)
    elif paramwise_cfg:
        settings = _paramwise_settings(model, named, paramwise_cfg, base_lr, base_wd, path)
    else:
        settings = {n: ({}, "default") for n, _ in named}
    groups, index = [], {}
    for name, p in named:
        opts, tag = settings[name]
        key = (tuple(sorted(opts.items())), tag)
        if key not in index:
            index[key] = len(groups)
            groups.append({"params": [], **opts, "_tag": tag, "_names": []})
        groups[index[key]]["params"].append(p)
        groups[index[key]]["_names"].append(name)
    log_summary(groups, frozen, base_lr, base_wd)
    return [{k: v for k, v in g.items() if not k.startswith("_")} for g in groups]


def log_summary(groups, frozen, base_lr, base_wd):
    lines = [f"optimizer param groups ({len(groups)}; {len(frozen)} frozen tensors left out):"]
    for i, g in enumerate(groups):
        n = sum(p.numel() for p in g["params"])
        lr = g.get("lr", base_lr)
        wd = g.get("weight_decay", base_wd)
        lines.append(f"  [{i}] {g['_tag']:<24} tensors={len(g['params']):<4} numel={n:<9} lr={lr:.6g} "
                     f"weight_decay={wd if wd is None else f'{wd:.6g}'}  e.g. {g['_names'][0]}")
    log.info("\n".join(lines))


# -- MMEngine paramwise_cfg -------------------------------------------------------------------
def _check_number(cfg, key, path, minimum=0.0):
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < minimum:
        raise ConfigError(f"{path}.{key}", f"expected a number >= {minimum}, got {v!r}")
    return float(v)


def _paramwise_settings(model, named, cfg, base_lr, base_wd, path):
    if not isinstance(cfg, dict):
        raise ConfigError(path, f"expected a mapping, got {type(cfg).__name__}")
    for key in cfg:
        if key not in PARAMWISE_KEYS:
            raise ConfigError(f"{path}.{key}", "unknown key", did_you_mean(key, PARAMWISE_KEYS)
                              or f"known: {', '.join(PARAMWISE_KEYS)}")
    mults = {k: _check_number(cfg, k, path) for k in MULT_KEYS if k in cfg}
    if cfg.get("no_decay_norm_bias"):
        mults.setdefault("norm_decay_mult", 0.0)
        mults.setdefault("bias_decay_mult", 0.0)
    custom = cfg.get("custom_keys") or {}
    if not isinstance(custom, dict):
        raise ConfigError(f"{path}.custom_keys", "expected a mapping {name_substring: {lr_mult, decay_mult}}")
    for key, val in custom.items():
        kpath = f"{path}.custom_keys.{key}"
        if not isinstance(val, dict):
            raise ConfigError(kpath, "expected {lr_mult, decay_mult}")
        for k in val:
            if k not in ("lr_mult", "decay_mult"):
                raise ConfigError(f"{kpath}.{k}", "unknown key", "use lr_mult and/or decay_mult")
            _check_number(val, k, kpath)
    # Longest key first; equal lengths alphabetically (MMEngine's order).
    ordered_keys = sorted(sorted(custom), key=len, reverse=True)
    layer_scale = _layer_decay(model, named, cfg, path) if "decay_rate" in cfg else {}

    owner = {}  # parameter name -> (module, attribute name)
    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = (module, pname)

    out = {}
    for name, p in named:
        lr_mult, decay_mult, rule = 1.0, 1.0, None
        key = next((k for k in ordered_keys if k in name), None)
        module, attr = owner.get(name, (None, name))
        if key is not None:
            lr_mult = float(custom[key].get("lr_mult", 1.0))
            decay_mult = float(custom[key].get("decay_mult", 1.0))
            rule = f"custom:{key}"
        elif isinstance(module, NORM_TYPES):
            decay_mult, rule = mults.get("norm_decay_mult", 1.0), "norm"
        elif attr.endswith("bias"):
            lr_mult, decay_mult, rule = mults.get("bias_lr_mult", 1.0), mults.get("bias_decay_mult", 1.0), "bias"
        elif isinstance(module, nn.Conv2d) and module.groups == module.in_channels and module.groups > 1:
            decay_mult, rule = mults.get("dwconv_decay_mult", 1.0), "dwconv"
        elif p.ndim == 1:
            decay_mult, rule = mults.get("flat_decay_mult", 1.0), "flat"
        # Tags name only the rules that changed something: they separate groups in the summary.
        tags = [rule] if (lr_mult, decay_mult) != (1.0, 1.0) else []
        if name in layer_scale:
            depth, scale = layer_scale[name]
            lr_mult *= scale
            tags.append(f"layer{depth}")
        opts = {}
        if base_lr is not None and lr_mult != 1.0:
            opts["lr"] = base_lr * lr_mult
        if base_wd is not None and decay_mult != 1.0:
            opts["weight_decay"] = base_wd * decay_mult
        out[name] = (opts, "/".join(tags) if opts else "default")
    return out


# -- layer-wise LR decay -----------------------------------------------------------------------
def _layer_decay(model, named, cfg, path):
    """{param name: (depth, lr factor)} for ResNet / ConvNeXt / ViT (torchvision) backbones."""
    rate = _check_number(cfg, "decay_rate", path)
    if not 0 < rate <= 1:
        raise ConfigError(f"{path}.decay_rate", f"must be in (0, 1], got {rate}")
    decay_type = cfg.get("decay_type", "layer_wise")
    if decay_type not in ("layer_wise", "stage_wise"):
        raise ConfigError(f"{path}.decay_type", f"unknown {decay_type!r}", "use layer_wise or stage_wise")
    num_layers = cfg.get("num_layers")
    if num_layers is not None and (isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1):
        raise ConfigError(f"{path}.num_layers", f"expected an int >= 1, got {num_layers!r}")
    prefix, net, kind = _find_backbone(model)
    if kind == "resnet":
        blocks = [(f"layer{s}.{b}", s) for s in range(1, 5) if hasattr(net, f"layer{s}")
                  for b in range(len(getattr(net, f"layer{s}")))]
        stem = ("conv1", "bn1")
    elif kind == "convnext":
        # features: [stem, stage1, down, stage2, down, stage3, down, stage4]; a downsample layer
        # belongs with the blocks that follow it.
        blocks, stage = [], 0
        for i, mod in enumerate(net.features):
            if i == 0:
                continue
            if i % 2 == 1:
                stage += 1
                blocks += [(f"features.{i}.{b}", stage) for b in range(len(mod))]
            else:
                blocks.append((f"features.{i}", stage + 1))
        stem = ("features.0",)
    elif kind == "vit":
        if decay_type == "stage_wise":
            raise ConfigError(f"{path}.decay_type", "a ViT has no stages", "use layer_wise")
        blocks = [(f"encoder.layers.{n}", 1) for n, _ in net.encoder.layers.named_children()]
        stem = ("conv_proj", "class_token", "encoder.pos_embedding")
    else:
        raise ConfigError(f"{path}.decay_rate", f"layer-wise LR decay does not know {kind}",
                          "supported: torchvision ResNet/ResNeXt/Wide-ResNet, ConvNeXt, VisionTransformer")
    if decay_type == "stage_wise":
        depth_of = {name: stage for name, stage in blocks}
        n = max(depth_of.values())
    else:
        count = len(blocks)
        n = num_layers or count
        # num_layers < blocks buckets consecutive blocks together (as mmseg's "block_id // 3").
        depth_of = {name: 1 + (i * n) // count for i, (name, _) in enumerate(blocks)}
    head = n + 1
    out = {}
    for name, _ in named:
        rel = name[len(prefix):] if name.startswith(prefix) else None
        depth = head
        if rel is not None:
            if any(rel == s or rel.startswith(s + ".") for s in stem):
                depth = 0
            else:
                for block, d in depth_of.items():
                    if rel.startswith(block + "."):
                        depth = d
                        break
        out[name] = (depth, rate ** (head - depth))
    return out


def _find_backbone(model):
    """(name prefix, net, kind): ``model.backbone`` (or a detector's ResNet ``body``)."""
    from torchvision.models import ConvNeXt, ResNet, VisionTransformer

    kinds = ((ResNet, "resnet"), (ConvNeXt, "convnext"), (VisionTransformer, "vit"))
    for name, mod in model.named_modules():
        for cls, kind in kinds:
            if isinstance(mod, cls):
                return (f"{name}." if name else ""), mod, kind
    # Detectors keep a ResNet trunk cut into an IntermediateLayerGetter (same child names).
    for name, mod in model.named_modules():
        if hasattr(mod, "conv1") and hasattr(mod, "layer1") and isinstance(mod, nn.ModuleDict):
            return (f"{name}." if name else ""), mod, "resnet"
    return "", model, type(model).__name__
