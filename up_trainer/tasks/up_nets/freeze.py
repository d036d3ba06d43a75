"""UP's ``self`` net entry: options of the whole model. Its one option, ``freeze_patterns``, is
mapped: every parameter whose name starts with a pattern (or matches ``r:<regex>``) takes no
gradient, and every module whose name matches stays in eval mode while the rest trains (its
BatchNorm statistics do not move), as UP's model helper does. A linear probe is written this way:
``freeze_patterns: [backbone]`` with the pretrained backbone in ``saver.pretrain_model``.

A pattern that matches no parameter is refused in one line (a typo would otherwise train the
whole net), and so is a ``pretrain_model`` that loads nothing into the frozen parameters (the
probe would measure random weights).
"""
import re

from ...errors import CheckpointError, ConfigError, join_path
from .options import Options

SELF = "self"


def has_self_entry(net_cfg):
    return any(isinstance(e, dict) and e.get("type") == SELF for e in net_cfg)


def matches(patterns, name):
    for pattern in patterns:
        if pattern.startswith("r:"):
            if re.search(pattern[2:], name):
                return True
        elif name.startswith(pattern):
            return True
    return False


class FrozenByPattern:
    """Mixed into a built net's class: frozen modules stay in eval mode."""

    freeze_patterns = ()

    def train(self, mode=True):
        super().train(mode)
        for name, module in self.named_modules():
            if name and matches(self.freeze_patterns, name):
                module.eval()
        return self

    def check_pretrained(self, report, source):
        """``report``: what the tolerant loader loaded (weights.load_fitting)."""
        frozen = [n for n, _ in self.named_parameters() if matches(self.freeze_patterns, n)]
        if frozen and not set(frozen) & set(report["loaded"]):
            raise CheckpointError(f"{source} holds no weights for the frozen parameters ({', '.join(self.freeze_patterns)}"
                                  f": {len(frozen)} tensors, e.g. {frozen[0]}), which would stay random; point "
                                  "saver.pretrain_model at a checkpoint with those keys (a pretraining run's "
                                  "backbone.*), or drop freeze_patterns")


def build_with_self_entry(net_cfg, path, build):
    """Build the net without its ``self`` entry, then freeze by its patterns. Error paths keep
    the file's numbering (the entries after ``self`` are one further on)."""
    at = [i for i, e in enumerate(net_cfg) if isinstance(e, dict) and e.get("type") == SELF]
    if len(at) > 1:
        raise ConfigError(join_path(join_path(path, at[1]), "type"), "UP's self entry is given twice")
    index = at[0]
    epath = join_path(path, index)
    for key in net_cfg[index]:
        if key not in ("name", "type", "kwargs"):
            raise ConfigError(join_path(epath, key), "unknown key", "UP's self entry has name, type, kwargs")
    opts = Options(net_cfg[index].get("kwargs"), join_path(epath, "kwargs"), "self entry")
    patterns = opts.take("freeze_patterns", [], types=list)
    opts.done()
    for j, pattern in enumerate(patterns):
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(join_path(opts.at("freeze_patterns"), j), f"expected a name prefix or r:<regex>, got {pattern!r}")
        if pattern.startswith("r:"):
            try:
                re.compile(pattern[2:])
            except re.error as exc:
                raise ConfigError(join_path(opts.at("freeze_patterns"), j), f"not a regular expression: {exc}") from None
    rest = net_cfg[:index] + net_cfg[index + 1:]
    try:
        model = build(rest, path)
    except ConfigError as exc:
        raise ConfigError(_renumber(exc.path, path, index), exc.message, exc.hint) from None
    if isinstance(getattr(model, "num_classes_path", None), str):
        model.num_classes_path = _renumber(model.num_classes_path, path, index)
    names = [n for n, _ in model.named_parameters()]
    for j, pattern in enumerate(patterns):
        if not any(matches([pattern], n) for n in names):
            tops = sorted({n.split(".")[0] for n in names})
            raise ConfigError(join_path(opts.at("freeze_patterns"), j), f"{pattern!r} matches no parameter of the net",
                              f"parameter names start with {', '.join(tops)}")
    for name, param in model.named_parameters():
        if matches(patterns, name):
            param.requires_grad_(False)
    if patterns:
        model.__class__ = type(f"Frozen{type(model).__name__}", (FrozenByPattern, type(model)), {})
        model.freeze_patterns = tuple(patterns)
        model.train(model.training)
    return model


def _renumber(error_path, path, index):
    """``net[i]...`` of the list without the self entry -> the file's ``net[i + 1]`` for i >= index."""
    if not error_path:
        return error_path
    match = re.match(re.escape(path) + r"\[(\d+)\]", error_path)
    if not match or int(match[1]) < index:
        return error_path
    return f"{path}[{int(match[1]) + 1}]" + error_path[match.end():]
