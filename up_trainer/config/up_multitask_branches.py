"""Which entries of a UP net list form the task branches of a multitask net: the entries
wrapped in UP's ``multitask_wrapper``, with the task indices (``idxs``) each runs for. Read by
the net builder (tasks/up_nets/multitask_net.py) and the config translation (up_multitask.py),
so no torch import here.
"""
from ..errors import ConfigError, did_you_mean, join_path

WRAPPER = "multitask_wrapper"


def wrapper_idxs(entry, path):
    """The ``idxs`` of an entry's multitask_wrapper, or None when it has no wrappers."""
    wrappers = entry.get("wrappers")
    if wrappers is None:
        return None
    wpath = join_path(path, "wrappers")
    if not isinstance(wrappers, list) or len(wrappers) != 1 or not isinstance(wrappers[0], dict):
        raise ConfigError(wpath, "expected one {type: multitask_wrapper, kwargs: {cfg: {idxs}}}")
    wrapper = wrappers[0]
    if wrapper.get("type") != WRAPPER:
        raise ConfigError(join_path(join_path(wpath, 0), "type"), f"UP's module wrapper {wrapper.get('type')!r} "
                          "(quantization, sparsity, distillation) is not mapped", f"{WRAPPER} (multitask heads) is")
    kpath = join_path(join_path(wpath, 0), "kwargs")
    _known(wrapper, ("type", "kwargs"), join_path(wpath, 0))
    kwargs = _mapping(wrapper.get("kwargs") or {}, kpath)
    _known(kwargs, ("cfg",), kpath)
    cpath = join_path(kpath, "cfg")
    cfg = _mapping(kwargs.get("cfg") or {}, cpath)
    _known(cfg, ("idxs", "debug", "add_prefix"), cpath)  # debug: UP's per-forward log lines, not written
    if cfg.get("add_prefix"):
        raise ConfigError(join_path(cpath, "add_prefix"), "module prefixes are UP's log labels; not mapped",
                          "leave it out")
    idxs = cfg.get("idxs", [])
    if not isinstance(idxs, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in idxs):
        raise ConfigError(join_path(cpath, "idxs"), f"expected task indices >= 0, got {idxs!r}")
    return list(idxs)


def _mapping(value, path):
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
    return value


def _known(mapping, keys, path):
    for key in mapping:
        if key not in keys:
            raise ConfigError(join_path(path, key), f"is not read by UP's {WRAPPER}",
                              did_you_mean(key, keys) or f"it reads {', '.join(keys)}")


def is_multitask_net(net_cfg):
    """A net list with a multitask_wrapper on some entry (other UP wrappers are refused elsewhere)."""
    return isinstance(net_cfg, list) and any(
        isinstance(e, dict) and isinstance(e.get("wrappers"), list)
        and any(isinstance(w, dict) and w.get("type") == WRAPPER for w in e["wrappers"]) for e in net_cfg)


def split_branches(net_cfg, path):
    """(shared entries, [(branch name, [entry indices], idxs)]) of a wrapped net list."""
    shared, branches = [], []
    for i, entry in enumerate(net_cfg):
        idxs = wrapper_idxs(entry, join_path(path, i))
        if idxs is None:
            if branches:
                raise ConfigError(join_path(path, i), "an entry without multitask_wrapper after the task branches",
                                  "the shared trunk (backbone, neck) comes first; every later entry belongs to a task")
            shared.append(i)
        elif branches and branches[-1][2] == idxs and len(branches[-1][1]) == 1:
            branches[-1][1].append(i)  # a head and its post-process: one branch
        else:
            branches.append((entry["name"], [i], idxs))
    return shared, branches


def stripped(entry):
    return {k: v for k, v in entry.items() if k != "wrappers"}
