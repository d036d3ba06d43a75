"""UP hook types up-trainer does not provide: each is refused at translation, in one line naming
what it is in UP and what to use instead (exit 2), instead of a bare "unknown hook type" when
the hooks are built. Checked in either form: a native file may carry a UP hook name too.

And the kwargs of a mapped UP hook that UP reads more loosely than the native hook does,
rewritten (UP form only) to what UP's hook does with them, with a note."""
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


UP_YOLOX_NOAUG_DEFAULTS = {"no_aug_epoch": 15, "max_epoch": 300}  # UP's yolox_noaug


def up_yolox_noaug_counts(cfg, notes):
    """UP's yolox_noaug switches once ``iteration >= epoch_size * (max_epoch - no_aug_epoch)``:
    with more no-aug epochs than ``max_epoch`` that holds from the first iteration, so every
    epoch trains on the hook's pipeline with the L1 loss (UP's yolox_fpga_quant_vitis_qat.yaml:
    15 of 5 epochs). The native hook says that with ``no_aug_epoch == max_epoch`` and refuses
    more, so a UP file's larger count is read as max_epoch, and said so."""
    hooks = cfg.get("hooks")
    for i, entry in enumerate(hooks if isinstance(hooks, list) else ()):
        if not isinstance(entry, dict) or entry.get("type") != "yolox_noaug":
            continue
        kwargs = entry.get("kwargs")
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict):
            continue  # validation names it with its path
        counts = {key: kwargs.get(key, default) for key, default in UP_YOLOX_NOAUG_DEFAULTS.items()}
        if not all(type(v) is int for v in counts.values()) or counts["max_epoch"] < 1:
            continue  # validation names a bad type or count
        if counts["no_aug_epoch"] > counts["max_epoch"]:
            entry["kwargs"] = {**kwargs, "no_aug_epoch": counts["max_epoch"]}
            notes.append(f"hooks[{i}].kwargs.no_aug_epoch: {counts['no_aug_epoch']} > max_epoch "
                         f"{counts['max_epoch']}: UP's hook switches before the first iteration, so every epoch "
                         f"trains on its transformer with the L1 loss; read as {counts['max_epoch']} (from epoch 1)")
