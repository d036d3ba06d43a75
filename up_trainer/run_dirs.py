"""A run directory as an input: the run a checkpoint belongs to (``up train --resume CKPT``
continues there), and a run dir given to ``up predict / eval / export`` in place of
--config and --checkpoint (its config.yaml, its best checkpoint, else its latest)."""
import os

import yaml

from .errors import UserError

CONFIG_NAME = "config.yaml"
CONFIG_MARK = "# resolved by up train"  # config.yaml's first line (run.write_resolved_config)


def _run_config(run_dir):
    """The saver section of ``run_dir``'s config.yaml, or None when it holds no run's config."""
    path = os.path.join(run_dir, CONFIG_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            if not f.readline().startswith(CONFIG_MARK):
                return None
            f.seek(0)
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    saver = data.get("saver") if isinstance(data, dict) else None
    return saver if isinstance(saver, dict) else {}


def save_dir_of(run_dir):
    saver = _run_config(run_dir)
    if saver is None:
        return None
    save_dir = str(saver.get("save_dir") or "checkpoints")
    return save_dir if os.path.isabs(save_dir) else os.path.join(run_dir, save_dir)


def find_run_dir(checkpoint):
    """The run dir whose config.yaml puts its checkpoints where ``checkpoint`` is (its folder
    or the folder above), or None."""
    folder = os.path.dirname(os.path.abspath(checkpoint))
    for candidate in (folder, os.path.dirname(folder)):
        save_dir = save_dir_of(candidate)
        if save_dir is not None and os.path.realpath(save_dir) == os.path.realpath(folder):
            return candidate
    return None


def run_checkpoint(run_dir):
    """ckpt_best.pth of the run in ``run_dir``, else its ckpt_latest.pth."""
    from .engine.checkpoint import BEST, LATEST

    save_dir = save_dir_of(run_dir)
    if save_dir is None:
        raise UserError(f"{run_dir}: not a run directory (no {CONFIG_NAME} written by up train)")
    for name in (BEST, LATEST):
        if os.path.isfile(os.path.join(save_dir, name)):
            return os.path.join(save_dir, name)
    raise UserError(f"{run_dir}: the run has no checkpoint yet ({BEST} or {LATEST} in {save_dir})")


def run_dir_inputs(config_path, checkpoint, want_checkpoint=True):
    """(config, checkpoint) with a run directory given as either one expanded: the run's
    config.yaml and (when no checkpoint is named and ``want_checkpoint``) its best or latest
    checkpoint. A checkpoint alone brings the config of the run it belongs to."""
    run_dir = next((p for p in (config_path, checkpoint) if p and os.path.isdir(p)), None)
    if run_dir is not None:
        if save_dir_of(run_dir) is None:
            raise UserError(f"{run_dir}: not a run directory (no {CONFIG_NAME} written by up train)")
        if config_path is None or config_path == run_dir:
            config_path = os.path.join(run_dir, CONFIG_NAME)
        if (checkpoint is None and want_checkpoint) or checkpoint == run_dir:
            checkpoint = run_checkpoint(run_dir)
    elif config_path is None and checkpoint:
        owner = find_run_dir(checkpoint)
        if owner is None:
            raise UserError(f"--config is missing, and {checkpoint} is not in a run directory of up train "
                            "(give --config CFG)")
        config_path = os.path.join(owner, CONFIG_NAME)
    if config_path is None:
        raise UserError("give --config CFG, or a run directory (--config RUN_DIR)")
    return config_path, checkpoint
