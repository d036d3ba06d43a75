"""`up hooks [NAME]`: generated from the registry, never written by hand."""
import inspect

from ..errors import ConfigError
from ..registry import HOOKS, public_params
from ..engine.hooks import PRIORITIES, parse_priority


def _priority_text(cls):
    value = parse_priority(cls.priority)
    names = [n for n, v in PRIORITIES.items() if v == value]
    return f"{names[0]} ({value})" if names else str(value)


def describe_hooks(name=None):
    if name is not None and name not in HOOKS:
        HOOKS.get(name, path="up hooks NAME")  # raises with close matches
    names = [name] if name else HOOKS.names()
    blocks = []
    for n in names:
        cls = HOOKS.get(n)
        doc = inspect.getdoc(cls) or ""
        repeat = "may be listed more than once" if cls.allow_multiple else "one per run"
        lines = [f"{n}  priority {_priority_text(cls)}, {repeat}", "  " + (doc if name else doc.splitlines()[0] if doc else "")]
        params = public_params(cls)
        if params:
            lines.append("  kwargs:")
        for pname, p in params:
            default = "required" if p.default is p.empty else repr(p.default)
            lines.append(f"    {pname}: {default}")
        blocks.append("\n".join(lines))
    if not blocks:
        raise ConfigError(None, "no hooks registered")
    return "\n\n".join(blocks)
