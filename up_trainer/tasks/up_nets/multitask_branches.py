"""Which entries of a UP net list form the task branches of a multitask net: the entries
wrapped in UP's ``multitask_wrapper``, with the task indices (``idxs``) each runs for. Read by
the net builder (multitask_net.py) and the config translation (config/up_multitask.py), so no
torch import here.
"""
from ...errors import ConfigError, join_path
from .options import Options

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
        raise ConfigError(join_path(join_path(wpath, 0), "type"), f"UP's module wrapper {wrapper.get('type')!r} (quantization, "
                          "sparsity, distillation) is not mapped", f"{WRAPPER} (multitask heads) is")
    opts = Options(wrapper.get("kwargs"), join_path(join_path(wpath, 0), "kwargs"), WRAPPER)
    cfg = Options(opts.take("cfg", {}, types=dict), opts.at("cfg"), WRAPPER)
    opts.done()
    idxs = cfg.take("idxs", [], types=list, check=lambda v: None if all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v) else "expected task indices >= 0")
    cfg.ignore("debug", "UP's per-forward log lines")
    cfg.take("add_prefix", "", types=str, only="", why="module prefixes are UP's log labels")
    cfg.done()
    return list(idxs)


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
