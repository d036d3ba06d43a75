"""UP hook types up-trainer does not provide: each is refused at translation, in one line naming
what it is in UP and what to use instead (exit 2), instead of a bare "unknown hook type" when
the hooks are built. Checked in either form: a native file may carry a UP hook name too."""
from ..errors import ConfigError, join_path

# type -> (what it is in UP, what to use here)
UP_UNMAPPED_HOOKS = {
    "feature_vis": ("feature-map visualisation of a named layer", "use grad_cam (heatmaps of a layer) or visualize"),
    "memory_analysis": ("GPU memory statistics every freq iterations to TensorBoard",
                        "train_val_logger logs max memory on every line and to its summary writer"),
}


def refuse_unmapped_hooks(cfg):
    """Raise the one-line refusal for the first listed UP hook type we do not provide."""
    hooks = cfg.get("hooks")
    for i, entry in enumerate(hooks if isinstance(hooks, list) else ()):
        entry_type = entry.get("type") if isinstance(entry, dict) else None
        if isinstance(entry_type, str) and entry_type in UP_UNMAPPED_HOOKS:
            what, instead = UP_UNMAPPED_HOOKS[entry_type]
            raise ConfigError(join_path(join_path("hooks", i), "type"),
                              f"{entry_type} is UP's {what}, which up-trainer does not provide", instead)
