"""Which submodules may run under activation checkpointing (UP's ``checkpoint_patterns``).

For each top-level module of the model named in the patterns (``backbone``, ``neck``,
``roi_head``...):

- ``patterns_mode: level, level: {num: N}`` takes the submodules exactly N levels below it
  (level 1 = its direct children). Branches shallower than N contribute nothing.
- ``patterns_mode: name, name_list: [a.b, ...]`` takes the named submodules (names relative to
  the top-level module; ``""`` is the top-level module itself). Overlapping names are refused.
- ``share_weight_num: K`` says the module is called K times per forward (a head shared over
  FPN levels); each call index 0..K-1 becomes its own unit the planner can choose, calls past
  K-1 follow unit K-1.

Excluded (logged): ModuleList / ModuleDict (never called themselves), leaves without parameters (activations, pooling, dropout, Identity:
checkpointing one of them alone keeps its input and saves next to nothing), and modules that
modify an input in place -- recomputation would then start from the modified tensor. The
static rule here: the module's first leaf in registration order (or the module itself) has
``inplace=True`` (``nn.ReLU(inplace=True)`` first). The dynamic rule (wrap.py): a dry run
compares every tensor input's version counter before and after the module's forward.
"""
from dataclasses import dataclass, field

from torch import nn

from ..errors import ConfigError, did_you_mean


@dataclass
class Candidate:
    name: str                # dotted name from the model root, e.g. backbone.layer1.0
    module: nn.Module
    share_weight_num: int = 1
    units: list = field(default_factory=list)

    def __post_init__(self):
        k = self.share_weight_num
        self.units = [self.name] if k == 1 else [f"{self.name}#{i}" for i in range(k)]

    def unit(self, call_index):
        return self.units[min(call_index, len(self.units) - 1)]


def parse_patterns(patterns, path="checkpoint_patterns"):
    """Validate the YAML structure; returns {top: (mode, num or names, share)}."""
    if not isinstance(patterns, dict) or not patterns:
        raise ConfigError(path, "expected a mapping of top-level module name to pattern",
                          "e.g. {backbone: {patterns_mode: level, level: {num: 2}}}")
    out = {}
    for top, spec in patterns.items():
        p = f"{path}.{top}"
        if not isinstance(spec, dict):
            raise ConfigError(p, f"expected a mapping, got {type(spec).__name__}")
        unknown = set(spec) - {"patterns_mode", "level", "name_list", "share_weight_num"}
        if unknown:
            key = sorted(unknown)[0]
            raise ConfigError(f"{p}.{key}", "unknown key",
                              did_you_mean(key, ["patterns_mode", "level", "name_list", "share_weight_num"]))
        mode = spec.get("patterns_mode", "level")
        share = spec.get("share_weight_num", 1)
        if isinstance(share, bool) or not isinstance(share, int) or share < 1:
            raise ConfigError(f"{p}.share_weight_num", f"expected an int >= 1, got {share!r}")
        if mode == "level":
            level = spec.get("level")
            num = level.get("num") if isinstance(level, dict) else None
            if isinstance(num, bool) or not isinstance(num, int) or num < 1:
                raise ConfigError(f"{p}.level.num", f"expected an int >= 1, got {num!r}", "e.g. level: {num: 2}")
            out[top] = ("level", num, share)
        elif mode == "name":
            names = spec.get("name_list")
            if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
                raise ConfigError(f"{p}.name_list", "expected a non-empty list of submodule names",
                                  "e.g. name_list: [layer3, layer4]")
            out[top] = ("name", list(names), share)
        else:
            raise ConfigError(f"{p}.patterns_mode", f"unknown mode {mode!r}", "use level or name")
    return out


def _at_depth(module, prefix, depth):
    if depth == 0:
        yield prefix, module
        return
    for name, child in module.named_children():
        yield from _at_depth(child, f"{prefix}.{name}", depth - 1)


def _max_depth(module):
    return 1 + max((_max_depth(c) for c in module.children()), default=-1)


def first_leaf(module):
    for m in module.modules():
        if not any(True for _ in m.children()):
            return m
    return module


def static_exclusion(module):
    """Why ``module`` cannot or should not be a candidate, or None."""
    if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
        return "container without a forward of its own (its items are called): use a deeper level"
    leaf = not any(True for _ in module.children())
    if leaf and not any(True for _ in module.parameters()):
        return "parameter-free leaf"
    if getattr(first_leaf(module), "inplace", False) is True:
        return f"first op {type(first_leaf(module)).__name__}(inplace=True) modifies its input"
    return None


def find_candidates(root, parsed, path="checkpoint_patterns"):
    """(candidates, excluded {name: reason}) for the parsed patterns on model ``root``."""
    tops = dict(root.named_children())
    found, excluded = [], {}
    for top, (mode, arg, share) in parsed.items():
        if top not in tops:
            raise ConfigError(f"{path}.{top}", f"the model has no top-level module {top!r}",
                              did_you_mean(top, tops) or f"it has: {', '.join(tops) or 'none'}")
        module = tops[top]
        if mode == "level":
            picked = list(_at_depth(module, top, arg))
            if not picked:
                raise ConfigError(f"{path}.{top}.level.num", f"{top} has no submodule {arg} levels deep",
                                  f"its deepest level is {_max_depth(module)}")
        else:
            subs = dict(module.named_modules())
            picked = []
            for name in arg:
                if name not in subs:
                    raise ConfigError(f"{path}.{top}.name_list", f"{top} has no submodule {name!r}",
                                      did_you_mean(name, [n for n in subs if n]))
                picked.append((f"{top}.{name}" if name else top, subs[name]))
        for name, mod in picked:
            why = static_exclusion(mod)
            if why:
                excluded[name] = why
            else:
                found.append(Candidate(name, mod, share))
    names = {c.name for c in found}
    for b in sorted(names):
        parts = b.split(".")
        for i in range(1, len(parts)):
            a = ".".join(parts[:i])
            if a in names:
                raise ConfigError(path, f"{b} is inside {a}: nested candidates are not supported",
                                  "list only one of them")
    return found, excluded
