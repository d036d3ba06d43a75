"""Does a checkpoint fit the configured trainer? Checked before anything is loaded.

A checkpoint of another architecture or class count, written by another optimizer, without
optimizer state, or edited by hand would otherwise fail half-way through loading (a size
mismatch traceback, ``KeyError: 'step'`` at the first Adam step) or, worse, load silently.
Each check raises one :class:`CheckpointError` naming the first key that does not fit.
"""
import torch

from ..errors import CheckpointError


def _shape(t):
    return tuple(t.shape)


def first_weight_mismatch(own, saved):
    """A sentence about the first key where state dict ``saved`` does not fit ``own``, or None."""
    if not isinstance(saved, dict):
        return f"its weights are a {type(saved).__name__}, not a state dict"
    for key, tensor in own.items():
        if key not in saved:
            return f"{key} is in the configured net but not in the checkpoint"
        value = saved[key]
        if not isinstance(value, torch.Tensor):
            return f"{key} is a {type(value).__name__} in the checkpoint, not a tensor"
        if value.shape != tensor.shape:
            return f"{key} has shape {_shape(value)} in the checkpoint, {_shape(tensor)} in the configured net"
    for key in saved:
        if key not in own:
            return f"{key} is in the checkpoint but not in the configured net"
    return None


def check_weights(module, saved, path, what="weights"):
    problem = first_weight_mismatch(module.state_dict(), saved)
    if problem:
        raise CheckpointError(f"{path}: the checkpoint's {what} do not fit the configured net: {problem} "
                              "(another architecture or class count?)")


def load_fitting_weights(module, weights, path):
    """Load ``weights`` into ``module`` when every key and shape fits; else one error line.
    A distilled run's adapters (trained beside the student) are left out of a bare student."""
    from ..distill import drop_adapter_weights

    weights = drop_adapter_weights(weights, module)
    check_weights(module, weights, path)
    module.load_state_dict(weights)


def optimizer_type(optimizer):
    return type(optimizer).__name__


def _hyper_keys(groups):
    return {k for g in groups for k in g if k not in ("params", "lr", "initial_lr")}


def _state_fits(state_shape, param_shape):
    """A per-parameter state tensor has the parameter's shape, or a factored one with some
    dimensions reduced to 1 (Adafactor's row and column statistics)."""
    return len(state_shape) == len(param_shape) and all(s in (p, 1) for s, p in zip(state_shape, param_shape))


def check_optimizer(optimizer, saved, saved_type, path):
    """The saved optimizer state must come from the same optimizer class over the same params."""
    where = f"{path}: the checkpoint's optimizer state does not fit trainer.optimizer"
    own_type = optimizer_type(optimizer)
    if saved_type is not None and saved_type != own_type:
        raise CheckpointError(f"{where}: it was written by {saved_type}, the config builds {own_type}")
    if not isinstance(saved, dict) or not isinstance(saved.get("param_groups"), list) \
            or not isinstance(saved.get("state"), dict):
        raise CheckpointError(f"{where}: it is not an optimizer state dict (needs 'state' and 'param_groups')")
    own_groups, saved_groups = optimizer.param_groups, saved["param_groups"]
    if not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in saved_groups):
        raise CheckpointError(f"{where}: a param group without a 'params' list")
    if saved_type is None:  # older checkpoints do not name the class: its hyper-parameters tell
        # Only keys the configured class lacks count: a newer torch may add keys to the same class
        # (its load_state_dict fills their defaults), but SGD never has betas nor Adam momentum.
        extra = _hyper_keys(saved_groups) - _hyper_keys(own_groups)
        if extra:
            raise CheckpointError(f"{where}: it was written by another optimizer class (its param groups have "
                                  f"{', '.join(sorted(extra))}), the config builds {own_type}")
    if len(saved_groups) != len(own_groups):
        raise CheckpointError(f"{where}: {len(saved_groups)} param groups in the checkpoint, "
                              f"{len(own_groups)} configured (paramwise_cfg/pconfig or frozen layers changed?)")
    params = {}
    for i, (mine, theirs) in enumerate(zip(own_groups, saved_groups)):
        if len(mine["params"]) != len(theirs["params"]):
            raise CheckpointError(f"{where}: param group {i} holds {len(theirs['params'])} tensors in the "
                                  f"checkpoint, {len(mine['params'])} configured")
        params.update(zip(theirs["params"], mine["params"]))
    for index, state in saved["state"].items():
        if index not in params or not isinstance(state, dict):
            raise CheckpointError(f"{where}: state for parameter {index!r}, which the configured optimizer lacks")
        own_shape = _shape(params[index])
        for name, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and not _state_fits(_shape(value), own_shape):
                raise CheckpointError(f"{where}: state.{index}.{name} has shape {_shape(value)}, "
                                      f"the parameter {own_shape} (parameter order or grouping changed?)")


def _check_types(ckpt, path):
    """Hand-edited checkpoints: every part the trainer reads has the type it writes."""
    expected = {"epoch": int, "iter": int, "state": (dict, type(None)), "hooks": (dict, type(None)),
                "rng": (dict, type(None)), "ema": (dict, type(None)), "lr_scheduler": (dict, type(None)),
                "scaler": (dict, type(None)), "rng_ranks": (list, type(None))}
    for key, types in expected.items():
        value = ckpt.get(key)
        if (key in ckpt or types is int) and (isinstance(value, bool) or not isinstance(value, types)):
            names = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
            raise CheckpointError(f"{path}: '{key}' should be a {names.replace('NoneType', 'null')}, got "
                                  f"{type(value).__name__} {str(value)[:40]}: the file was edited or is not ours")
    position = {"epoch": int, "epoch_iter": int, "iter": int, "epoch_done": bool, "metrics": dict}
    for key, value in (ckpt.get("state") or {}).items():
        want = position.get(key)
        if want is not None and (type(value) is not want if want is not dict else not isinstance(value, dict)):
            raise CheckpointError(f"{path}: state.{key} should be a {want.__name__}, got {type(value).__name__} "
                                  f"{str(value)[:40]}: the file was edited or is not ours")
    from .rng import rng_state_problem

    states = [("rng", ckpt.get("rng"))] + [(f"rng_ranks[{i}]", s) for i, s in enumerate(ckpt.get("rng_ranks") or [])]
    for key, state in states:
        problem = rng_state_problem(state) if state is not None else None
        if problem:
            raise CheckpointError(f"{path}: '{key}' {problem}: the file was edited or is not ours")


def check_resumable(trainer, ckpt, path):
    """Everything a full resume loads, compared with the trainer before any of it is loaded."""
    _check_types(ckpt, path)
    check_weights(trainer.module, ckpt["model"], path)
    check_class_names(trainer, ckpt, path)
    if trainer.optim is None:
        return
    if ckpt.get("optimizer") is None:
        raise CheckpointError(f"{path} holds no optimizer state, so resuming would restart the optimizer "
                              "from scratch; to start a new run from its weights, give it as "
                              "saver.pretrain_model instead")
    check_optimizer(trainer.optim.optimizer, ckpt["optimizer"], ckpt.get("optimizer_type"), path)
    check_within_run(trainer, ckpt, path)
    ema = ckpt.get("ema")
    if ema is not None and "model" in ema:  # loaded by the ema hook when it is enabled
        check_weights(trainer.module, ema["model"], path, what="EMA weights")


def check_class_names(trainer, ckpt, path):
    """The data's classes must be the ones the run trained on, in the same order: resuming
    with the label map changed would go on training every box under another class."""
    from ..data.label_map import recorded_classes, shown_names

    saved, now = recorded_classes(ckpt), getattr(trainer, "class_names", None)
    if saved is not None and now is not None and list(now) != saved:
        raise CheckpointError(f"{path} was trained on the classes {shown_names(saved)}, the configured data has "
                              f"{shown_names(list(now))}; resuming would mix two label maps (start a new run from "
                              "its weights with saver.pretrain_model, or restore the data's classes)")


def saved_position(ckpt):
    """The training position a checkpoint holds (TrainState's dict; older files: epoch, iter)."""
    return ckpt.get("state") or {"epoch": ckpt["epoch"], "iter": ckpt["iter"]}


def describe_position(position):
    if position.get("epoch_done", True):
        return f"the end of epoch {position['epoch']} (iteration {position['iter']})"
    return f"epoch {position['epoch']} batch {position.get('epoch_iter', 0)} (iteration {position['iter']})"


def check_within_run(trainer, ckpt, path):
    """A checkpoint that trained further than the configured run would end (max_epoch lowered
    since, or another run's file) is refused: resuming it would train nothing and say nothing,
    or train an epoch the schedule does not have."""
    position = saved_position(ckpt)
    if trainer.schedule.resume_point(position) != "past":
        return
    key = trainer.schedule.length.length_key(trainer.trainer_cfg)
    if key == "trainer.max_iter":
        configured, needed = trainer.trainer_cfg["max_iter"], position["iter"] + 1
    else:
        configured = trainer.trainer_cfg["max_epoch"]
        needed = position["epoch"] + 1 if position.get("epoch_done", True) else position["epoch"]
    raise CheckpointError(f"{path} was saved at {describe_position(position)}, past the end of this run: {key} "
                          f"is {configured} (to continue that run, raise {key} to {needed} or more)")
