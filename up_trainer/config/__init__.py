"""Config resolution: file + _base_ + default hooks + --opts, then schema validation."""
from ..errors import ConfigError, did_you_mean, join_path
from .loader import load_file, parse_yaml
from .opts import apply_opts, parse_opt
from .shortcuts import listed_hook_types, shortcuts_to_hooks
from .schema import validate
from .up_form import translate

# Hooks every run gets unless the YAML lists one of the same type or switches it off with
# ``default_hooks: {logger: null}`` (MMEngine style). Replacing the entry replaces the config.
DEFAULT_HOOKS = {
    "logger": {"type": "train_val_logger"},
    "checkpoint": {"type": "auto_checkpoint"},
    "best": {"type": "auto_save_best"},
    "insight": {"type": "eval_insight"},
}


def add_default_hooks(cfg):
    overrides = cfg.pop("default_hooks", None) or {}
    if not isinstance(overrides, dict):
        raise ConfigError("default_hooks", "expected a mapping like {logger: null}")
    hooks = cfg.get("hooks")
    if hooks is None:
        hooks = cfg["hooks"] = []
    if not isinstance(hooks, list):
        raise ConfigError("hooks", f"expected a list of {{type, kwargs}} entries, got {type(hooks).__name__}")
    for key in overrides:
        if key not in DEFAULT_HOOKS:
            raise ConfigError(join_path("default_hooks", key), "unknown default hook",
                              did_you_mean(key, DEFAULT_HOOKS) or f"default hooks: {', '.join(DEFAULT_HOOKS)}")
    listed = listed_hook_types(hooks)
    for key, entry in DEFAULT_HOOKS.items():
        entry = overrides.get(key, entry)
        if entry is None:
            continue
        if not isinstance(entry, dict) or "type" not in entry:
            raise ConfigError(join_path("default_hooks", key), "expected null or a {type, kwargs} mapping")
        if entry["type"] not in listed:
            hooks.append(dict(entry))
    return cfg


def _addresses_a_hook_entry(opt):
    parts = opt.split("=", 1)[0].strip().split(".")
    return parts[0] == "hooks" and len(parts) > 1


def resolve_config(path, opts=(), files=None):
    """The config as the trainer sees it: validated, defaults filled, default hooks listed.
    ``files``: a list that receives every file read (the config and its ``_base_`` files)."""
    return resolve_loaded(load_file(path, files=files), opts, path)


def resolve_loaded(cfg, opts=(), source_path=None):
    """The steps after reading: ``cfg`` (a mapping as a file would give it, ``_base_`` files
    merged; changed in place) with ``opts`` applied, default hooks listed, UP's form translated,
    validated. ``source_path``: the file it came from (recorded in ``origin``), or None."""
    opts = list(opts or ())
    # One path for the file and the command line: an option acts as if it were written in the
    # YAML file (``hooks=[...]`` and ``default_hooks.logger=null`` included), then the default
    # hooks join the list as they do for a file; only options that address one entry of that
    # list (``hooks.train_val_logger.kwargs.freq=5``, ``hooks.0.kwargs...``) wait for them.
    in_hook_list = [o for o in opts if _addresses_a_hook_entry(o)]
    apply_opts(cfg, [o for o in opts if o not in in_hook_list])
    add_default_hooks(cfg)
    apply_opts(cfg, in_hook_list)
    translate(cfg, source_path)  # UP's dialect -> native structures (config/up_form.py)
    shortcuts_to_hooks(cfg)  # ema section / trainer.clip_grad -> hooks (config/shortcuts.py)
    return validate(cfg)


__all__ = ["resolve_config", "resolve_loaded", "apply_opts", "parse_yaml", "parse_opt", "DEFAULT_HOOKS", "validate"]
