"""``--opts KEY=VALUE``: dotted paths, list indexes, hooks addressed by type or ``name:``."""
from ..errors import ConfigError, did_you_mean, join_path
from .loader import parse_yaml


def parse_opt(opt):
    if "=" not in opt:
        raise ConfigError(f"--opts {opt}", "expected KEY=VALUE (e.g. trainer.max_epoch=10)")
    key, raw = opt.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--opts {opt}", "empty key path")
    try:
        value = parse_yaml(raw, source=f"--opts {key}") if raw.strip() else ""
    except ConfigError as exc:
        raise ConfigError(f"--opts {key}", f"value {raw!r} is not a YAML scalar or flow value: {exc.message}") from None
    return key.split("."), value


def _hook_index(hooks, name, path):
    """``hooks.grad_clipper`` -> index of the hook whose type is grad_clipper (or whose
    ``name:`` is; a name is unique, so it picks one of several hooks of a type)."""
    named = [i for i, h in enumerate(hooks) if isinstance(h, dict) and h.get("name") == name]
    if len(named) == 1:
        return named[0]
    matches = [i for i, h in enumerate(hooks) if isinstance(h, dict) and h.get("type") == name]
    if len(matches) == 1:
        return matches[0]
    types = [h.get("type") for h in hooks if isinstance(h, dict)]
    if not matches:
        raise ConfigError(join_path(path, name), "no hook of this type in the hook list",
                          did_you_mean(name, types) or f"hooks present: {', '.join(map(str, types)) or 'none'}")
    raise ConfigError(join_path(path, name), f"{len(matches)} hooks have this type; address one by index "
                      "or by its name:", f"indexes {matches}")


def set_by_path(cfg, parts, value, opt):
    node, path = cfg, ""
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(node, list):
            if part.lstrip("-").isdigit():
                idx = int(part)
                if not -len(node) <= idx < len(node):
                    raise ConfigError(join_path(path, idx), f"list index out of range (the list has {len(node)} items)",
                                      f"in --opts {opt}")
            elif path.split(".")[-1] == "hooks":
                idx = _hook_index(node, part, path)
            else:
                raise ConfigError(join_path(path, part), "this is a list; use an integer index", f"in --opts {opt}")
            key = idx
        elif isinstance(node, dict):
            key = part
        else:
            raise ConfigError(path, f"cannot set {part!r} inside a {type(node).__name__} value", f"in --opts {opt}")
        path = join_path(path, key)
        if last:
            node[key] = value
            return
        if isinstance(node, dict) and (key not in node or node[key] is None):
            node[key] = {}
        node = node[key]


def apply_opts(cfg, opts):
    for opt in opts or ():
        parts, value = parse_opt(opt)
        set_by_path(cfg, parts, value, opt)
    return cfg
