"""`up hooks [NAME]` and the docs' hook reference: generated from the registry, never by hand."""
import inspect
from dataclasses import dataclass
from typing import List, Tuple

from ..errors import ConfigError
from ..registry import HOOKS, public_params
from ..engine.hooks import PRIORITIES, parse_priority


@dataclass
class HookRecord:
    """What the registry knows about one hook: the single source of `up hooks` and the docs."""
    name: str
    priority: str  # "NORMAL (50)", or the bare int when no name has that value
    allow_multiple: bool
    doc: str  # the class docstring, dedented ("" when it has none)
    kwargs: List[Tuple[str, str]]  # (name, default as repr, or "required")
    module: str

    @property
    def repeat(self):
        return "may be listed more than once" if self.allow_multiple else "one per run"


def _priority_text(cls):
    value = parse_priority(cls.priority)
    names = [n for n, v in PRIORITIES.items() if v == value]
    return f"{names[0]} ({value})" if names else str(value)


def hook_record(name):
    cls = HOOKS.get(name, path="up hooks NAME")  # an unknown name raises with close matches
    kwargs = [(pname, "required" if p.default is p.empty else repr(p.default)) for pname, p in public_params(cls)]
    return HookRecord(name, _priority_text(cls), bool(cls.allow_multiple), inspect.getdoc(cls) or "", kwargs,
                      cls.__module__)


def hook_records():
    return [hook_record(n) for n in HOOKS.names()]


def describe_hooks(name=None):
    records = [hook_record(name)] if name is not None else hook_records()
    blocks = []
    for rec in records:
        summary = rec.doc if name else rec.doc.splitlines()[0] if rec.doc else ""
        lines = [f"{rec.name}  priority {rec.priority}, {rec.repeat}", "  " + summary]
        if rec.kwargs:
            lines.append("  kwargs:")
        lines += [f"    {pname}: {default}" for pname, default in rec.kwargs]
        blocks.append("\n".join(lines))
    if not blocks:
        raise ConfigError(None, "no hooks registered")
    return "\n\n".join(blocks)
