"""Build the ``net`` section.

Two spellings are accepted:

* a mapping ``{type, kwargs}``: one registered model, e.g.
  ``net: {type: resnet18, kwargs: {num_classes: 10}}``;
* UP's list of named parts ``[{name, type, kwargs}, ...]``. Each entry needs ``name`` and
  ``type``; ``kwargs`` is optional; other keys are errors. A classification architecture is a
  complete classifier (backbone, head and loss), so it must be the only entry:
  ``net: [{name: backbone, type: resnet18, kwargs: {num_classes: 10}}]``. Several parts of
  other tasks become one :class:`ComposedModel` whose children carry the entry names.
  A list with UP's own part types (``base_cls_head``, ``FPN``, ``RetinaSubNet``, ...) is
  UP's net and is mapped onto torchvision by :mod:`.up_nets`.

Either way the result has named top-level children (a classifier's is ``backbone``), which
hooks such as memory checkpointing address by name.
"""
from torch import nn

from ..errors import ConfigError, did_you_mean, join_path
from ..registry import MODELS

ENTRY_KEYS = ("name", "type", "kwargs")


class ComposedModel(nn.Module):
    """UP's multi-part net: parts run in YAML order on one dict, each adding its outputs
    (features, losses, predictions) for the next; forward returns the final dict."""

    def __init__(self, parts):
        super().__init__()
        for name, module in parts:
            self.add_module(name, module)

    def forward(self, batch):
        data = dict(batch)
        for module in self.children():
            data.update(module(data))
        return data


def _check_entry(entry, path, seen):
    if not isinstance(entry, dict):
        raise ConfigError(path, f"expected a mapping {{name, type, kwargs}}, got {type(entry).__name__}")
    for key in entry:
        if key not in ENTRY_KEYS:
            raise ConfigError(join_path(path, key), "unknown key",
                              did_you_mean(key, ENTRY_KEYS) or f"accepted: {', '.join(ENTRY_KEYS)}")
    for key in ("name", "type"):
        if key not in entry:
            raise ConfigError(join_path(path, key), "required key is missing",
                              "each entry is {name: backbone, type: resnet18, kwargs: {...}}")
    name = entry["name"]
    if not isinstance(name, str) or not name.isidentifier() or hasattr(nn.Module, name):
        raise ConfigError(join_path(path, "name"), f"{name!r} cannot name a module",
                          "use a python identifier such as backbone, neck, head")
    if name in seen:
        raise ConfigError(join_path(path, "name"), f"duplicate part name {name!r}")
    seen.add(name)


def _build_entry(entry, path):
    return MODELS.build({"type": entry["type"], "kwargs": entry.get("kwargs") or {}}, path)


def check_net(net_cfg):
    """What can be checked of the ``net`` section before any data is read: a UP net list kwarg
    by kwarg (a refused UP type or kwarg is one line, not a wait for the datasets first)."""
    if isinstance(net_cfg, list):
        from .up_nets import check_up_net, is_up_net

        if is_up_net(net_cfg):
            check_up_net(net_cfg)


def build_model(net_cfg, path="net"):
    """An nn.Module from the ``net`` section (see the module docstring for the two forms)."""
    if isinstance(net_cfg, dict):
        return MODELS.build(net_cfg, path)
    if not isinstance(net_cfg, list):
        raise ConfigError(path, f"expected {{type, kwargs}} or a list of {{name, type, kwargs}}, "
                          f"got {type(net_cfg).__name__}")
    if not net_cfg:
        raise ConfigError(path, "the list of net parts is empty")
    from .up_nets import build_up_net, is_up_net

    if is_up_net(net_cfg):
        return build_up_net(net_cfg, path)
    seen = set()
    for i, entry in enumerate(net_cfg):
        _check_entry(entry, join_path(path, i), seen)
    first = MODELS.get(net_cfg[0]["type"], join_path(join_path(path, 0), "type"))
    if getattr(first, "is_classifier", False) and len(net_cfg) > 1:
        # UP spelled classifiers as backbone + head + post_process; ours is one entry.
        raise ConfigError(join_path(path, 1), f"{net_cfg[0]['type']} is a complete classifier "
                          "(backbone, head and loss), so it must be the only net entry",
                          f"remove {path}[1:] and set num_classes in {path}[0].kwargs")
    if len(net_cfg) == 1:
        return _build_entry(net_cfg[0], join_path(path, 0))
    return ComposedModel([(e["name"], _build_entry(e, join_path(path, i))) for i, e in enumerate(net_cfg)])
