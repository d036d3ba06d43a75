"""Named modules of a built net: looking a dotted path up, and the channel count of its output
(for the adapter that maps a student's channels onto a teacher's)."""
import difflib

from torch import nn

from ..errors import ConfigError

SHOWN = 5


def module_names(model):
    return [name for name, _ in model.named_modules() if name]


def find_module(model, name, path, whose):
    """The submodule at dotted ``name``; a wrong one is one line naming the nearest paths."""
    modules = dict(model.named_modules())
    module = modules.get(name)
    if module is not None and name:
        return module
    names = module_names(model)
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    prefix = ".".join(parts)
    # the children of the longest part of the path that exists, closest first, then any close name
    children = [n for n in names if (n.rsplit(".", 1)[0] if "." in n else "") == prefix]
    near = difflib.get_close_matches(name, children, n=SHOWN, cutoff=0.0) if prefix else []
    near += [n for n in difflib.get_close_matches(name, names, n=SHOWN, cutoff=0.5) if n not in near]
    near = near[:SHOWN]
    raise ConfigError(path, f"the {whose} has no module {name!r}",
                      f"nearest: {', '.join(near)}" if near else "the net has no named modules")


def out_channels(module):
    """Channels (dim 1) of ``module``'s output, read from its last layer that says; None when
    nothing does (then the adapter's ``channels`` must be given)."""
    for m in reversed(list(module.modules())):
        if isinstance(m, nn.Conv2d):
            return m.out_channels
        if isinstance(m, nn.Linear):
            return m.out_features
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            return m.num_features
        if isinstance(m, nn.GroupNorm):
            return m.num_channels
    return None
