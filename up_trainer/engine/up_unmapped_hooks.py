"""UP hook types up-trainer does not provide: each is refused in one line naming what it is in
UP and what to use instead (exit 2), instead of a bare "unknown hook type"."""
from ..errors import ConfigError

# type -> (what it is in UP, what to use here)
UP_UNMAPPED_HOOKS = {
    "feature_vis": ("feature-map visualisation of a named layer", "use grad_cam (heatmaps of a layer) or visualize"),
    "memory_analysis": ("GPU memory statistics every freq iterations to TensorBoard",
                        "train_val_logger logs max memory on every line and to its summary writer"),
}


def refuse_unmapped_hook(entry_type, path):
    """Raise the one-line refusal for a UP hook type we do not provide; None otherwise."""
    if entry_type in UP_UNMAPPED_HOOKS:
        what, instead = UP_UNMAPPED_HOOKS[entry_type]
        raise ConfigError(path, f"{entry_type} is UP's {what}, which up-trainer does not provide", instead)
