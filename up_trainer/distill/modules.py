"""Named modules of a built net: looking a dotted path up, and the channel count of its output
(for the adapter that maps a student's channels onto a teacher's).

UP's module paths are read too (:func:`up_module_path`): a net built from a UP net list keeps
UP's entry names as its parts (``backbone``, ``neck``, ``roi_head``) and renames a UP module
path inside a part by the rules UP checkpoints' parameter names load through
(``NamesUpModules``), so UP's FPN names
``neck.c2_lateral``, ``neck.p2_conv`` .. ``neck.p5_conv`` and ``neck.p6_pool`` / ``p6_conv``
find torchvision's ``neck.inner_blocks.0``, ``neck.layer_blocks.0.0`` .. and
``neck.extra_blocks.pools.0`` / ``convs.0``, and ``backbone.layer0.0`` finds ``backbone.conv1``.
A UP ``ADAP`` part (``neck_adapt.conv.0.0``) lives in the student's ``distill_adapters``.
"""
import difflib

from torch import nn

from ..errors import ConfigError
from ..protocols import NamesUpModules

SHOWN = 5
ADAPTERS = "distill_adapters"  # the student's ModuleDict of trained mimic adapters and adapt parts
UP_NAMES = "UP's names map: neck.c<l>_lateral, neck.p<l>_conv, neck.p<l>_pool, backbone.layer0.<i>"


def up_module_path(model, name):
    """Our dotted path for UP's module path ``name`` in ``model``, or None."""
    modules = dict(model.named_modules())
    part, _, rest = name.partition(".")
    adapters = modules.get(ADAPTERS)
    if adapters is not None and part in adapters:  # a UP ADAP part: distill.adapt
        path = f"{ADAPTERS}.{name}"
        return path if path in modules else None
    if not isinstance(model, NamesUpModules):
        return None
    path = model.up_module_path(name)
    return path if path in modules else None


def module_names(model):
    return [name for name, _ in model.named_modules() if name]


def find_module(model, name, path, whose):
    """The submodule at dotted ``name``; a wrong one is one line naming the nearest paths."""
    modules = dict(model.named_modules())
    module = modules.get(name)
    if module is not None and name:
        return module
    translated = up_module_path(model, name) if name else None
    if translated is not None:
        return modules[translated]
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
    hint = f"nearest: {', '.join(near)}" if near else "the net has no named modules"
    if isinstance(model, NamesUpModules):
        hint += f"; {UP_NAMES}"
    raise ConfigError(path, f"the {whose} has no module {name!r}", hint)


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
