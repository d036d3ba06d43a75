"""The key each hook's state is saved under in a checkpoint (``ckpt['hooks'][key]``).

A key must name the same hook whatever the order of the YAML list, or a resume hands one
hook's state to another (two early_stopping hooks swapped in the list would each take the
other's patience count). The key is the hook's type, or its ``name:`` when the entry has one;
a type listed twice needs a ``name:`` on the repeats that keep state, so no key depends on the
position. Checkpoints written before names existed keyed repeats by position (``type``,
``type_2``); such a key is still taken when only one hook can own it.
"""
import re

from ..errors import CheckpointError, ConfigError, join_path, short_repr


def entry_keys(entries, classes, path="hooks"):
    """The state key of each hook entry (None for entries whose type is not known yet).

    ``classes``: the hook class of each entry. Refused in one line: a ``name:`` that is not a
    plain word, two entries with one key, and two unnamed entries of one type that both keep
    state (their keys could only be positions)."""
    keys, unnamed_at = [], {}  # type -> path of its first unnamed entry that keeps state
    owner = {}  # key -> path of the entry that has it
    for i, (entry, cls) in enumerate(zip(entries, classes)):
        p = join_path(path, i)
        name = entry.get("name")
        if name is not None and (not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+", name)):
            raise ConfigError(join_path(p, "name"), f"expected a word of letters, digits, _ or -, got {short_repr(name)}")
        htype = entry.get("type")
        if name is None and not isinstance(htype, str):
            keys.append(None)  # a missing or malformed type: building the entry reports it
            continue
        if name is None and cls is not None and cls.keeps_state():
            if htype in unnamed_at:
                raise ConfigError(p, f"{htype} is also listed at {unnamed_at[htype]} and both keep state in "
                                  "checkpoints, which a resume could only match by list position",
                                  f"add `name: <word>` to each entry, e.g. {{type: {htype}, name: {htype}_b, "
                                  "kwargs: ...}, so each state follows its hook")
            unnamed_at[htype] = p
        key = name if name is not None else htype
        if key in owner and (name is not None or (cls is not None and cls.keeps_state())):
            raise ConfigError(join_path(p, "name") if name is not None else p,
                              f"{key!r} is already the state key of {owner[key]}", "give each hook its own `name:`")
        owner.setdefault(key, p)
        keys.append(key)
    return keys


def saved_state_for(hooks, states):
    """{hook: its saved state} for the hooks ``states`` (a checkpoint's ``hooks``) has one for.

    A hook's own key first. A hook without one may take a position-keyed state of its type
    (``ema``, ``ema_2``: files written before names existed) when it is the only such state
    left and the only hook of its type left without one; more than one is refused, since
    which hook each belonged to is then unknown."""
    found = {h: states[h.name] for h in hooks if h.name in states}
    claimed = {h.name for h in hooks}
    waiting = {}  # type -> hooks of that type without a state of their own key
    for h in hooks:
        if h not in found and type(h).keeps_state():
            waiting.setdefault(h.type_name, []).append(h)
    for htype, owners in waiting.items():
        legacy = sorted(k for k in states if k not in claimed and re.fullmatch(re.escape(htype) + r"(_\d+)?", k))
        if not legacy:
            continue  # a hook the saving run did not have: it starts fresh
        if len(legacy) == 1 and len(owners) == 1:
            found[owners[0]] = states[legacy[0]]
            continue
        if len(legacy) == 1:
            raise CheckpointError(f"hooks: the checkpoint keeps one {htype} state ({legacy[0]}) and {len(owners)} of "
                                  f"this run's {htype} hooks could take it; give the one it belongs to "
                                  f"`name: {legacy[0]}`")
        raise CheckpointError(f"hooks: the checkpoint keeps {len(legacy)} {htype} states by list position "
                              f"({', '.join(legacy)}), so which of this run's {htype} hooks each belongs to is "
                              f"unknown; give the hooks these names (`name: {legacy[0]}`, ...) in the order "
                              "of the run that saved it")
    return found


def object_keys(hooks, taken=None, path="hooks"):
    """The state key of each hook object the Python API adds (``train(..., hooks=[...])``):
    its ``name`` attribute when set, else its class name, on the rules of :func:`entry_keys`
    (two unnamed objects of one class that keep state are refused: their keys could only be
    positions). ``taken``: {state key: keeps state} of the run's own hooks; a key of theirs is
    refused for an object when either keeps state."""
    entries = [{"type": type(h).__name__} if h.name is None else {"type": type(h).__name__, "name": h.name}
               for h in hooks]
    keys = entry_keys(entries, [type(h) for h in hooks], path)
    for i, (hook, key) in enumerate(zip(hooks, keys)):
        if taken and key in taken and (taken[key] or type(hook).keeps_state()):
            raise ConfigError(join_path(path, i), f"{key!r} is already the state key of the config's hook {key}",
                              f"give this object its own name before passing it: hook.name = '{key}_b'")
    return keys
