"""Every option an error message tells the user to set or use exists: the hints are collected
from up_trainer's string literals (docstrings left out) and each option checked against what
reads it: a ``--flag``
against the options of the ``up`` commands, a ``section.key`` against the config schema,
``dataset kwargs X`` against the registered datasets' arguments, any other key against the
names the code reads (a hint naming an option nothing reads sends the user nowhere)."""
import ast
import inspect
import pathlib
import re

import click

import up_trainer

ROOT = pathlib.Path(up_trainer.__file__).parent
# "set X", "use X", "give X: ..." (a key with a value), "dataset kwargs X"
HINT = re.compile(r"\b(?:set|use|give|pass|add|try|with|drop|lower|raise|increase|reduce)\s+(?:the\s+)?(--[a-z][a-z0-9-]*|dataset kwargs [a-z_]+"
                  r"|[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*|\[\d+\])+|[a-z_][a-z0-9_]*(?=: ))")


def _text(node):
    """A string literal's text; an f-string's with ``{}`` for each placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _message_nodes(tree):
    """Every string literal of a module but its docstrings (messages are often built in a
    variable first: ``hint = "set ..."``)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if id(node) in docstrings:
            continue
        text = _text(node)
        if text:
            yield text, node.lineno


def collected_hints():
    hints = {}
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for text, line in _message_nodes(tree):
            for match in HINT.finditer(text):
                hints.setdefault(match.group(1), f"{path.relative_to(ROOT.parent)}:{line}")
    return hints


def cli_options():
    from up_trainer.cli import main

    names, todo = set(), [main]
    while todo:
        command = todo.pop()
        for param in command.params:
            names.update(o for o in param.opts + param.secondary_opts if o.startswith("--"))
        if isinstance(command, click.Group):
            todo += list(command.commands.values())
    return names


def dataset_arguments():
    from up_trainer.registry import DATASETS

    args = set()
    for name in DATASETS.names():
        args.update(inspect.signature(DATASETS.get(name).__init__).parameters)
    return args


def names_read():
    """Every string literal and every argument name in up_trainer: what a relative key can be."""
    out = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
            elif isinstance(node, ast.arg):
                out.add(node.arg)
    return out


def test_every_option_hint_names_an_option_that_exists():
    from up_trainer.config.schema import SCHEMAS, SECTIONS

    hints = collected_hints()
    assert len(hints) > 15, hints  # the collector finds the hints there are
    options, datasets, read = cli_options(), dataset_arguments(), names_read()
    fields = {k for section in SCHEMAS.values() for k in section}
    wrong = []
    for hint, where in sorted(hints.items()):
        if hint.startswith("--"):
            ok = hint in options
        elif hint.startswith("dataset kwargs "):
            ok = hint.split()[-1] in datasets
        elif "." in hint and hint.split(".")[0] in SECTIONS:
            section, key = hint.split(".")[0], re.split(r"[.\[]", hint)[1]
            ok = key in SCHEMAS[section] if section in SCHEMAS else True  # free sections: any key
        else:  # a key relative to where the error points (a hook's kwargs, a distill job)
            first = re.split(r"[.\[]", hint)[0]
            ok = first in read or first in fields or first in datasets
        if not ok:
            wrong.append(f"{where}: {hint}")
    assert not wrong, "hints naming options that do not exist:\n" + "\n".join(wrong)
