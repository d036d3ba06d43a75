"""No module of up_trainer keeps mutable state in module-level names, beyond a short declared
list: a run's settings travel in the objects it builds (its DataContext for the data sets and
readers, data/context.py), so one run, test or API call never reads what another left behind.

The scan finds every module-level name assigned after import: a ``global X`` statement in a
function (a setter, a lazy memo), and an assignment to another module's attribute
(``readers._max_pixels = ...``, ``setattr(model_input, ...)``). Each one allowed below is
genuinely process-wide and says why; a new one fails here until it is declared or, better,
handed on as a parameter."""
import ast
import os

from conftest import REPO

PACKAGE = "up_trainer"

ALLOWED = {
    ("up_trainer.registry", "_plugins_loaded"):
        "entry-point plugins register into the import-time registries, once per process",
    ("up_trainer.engine.allocator", "_applied"):
        "glibc's malloc thresholds belong to the process; they are set once and the outcome remembered",
    ("up_trainer.tasks.det.digits_det", "_DIGITS"):
        "a read-only memo of scikit-learn's bundled digits, the same for every run",
    ("up_trainer.config.redact", "_known_pattern"):
        "every secret seen is hidden from every text the process writes (logs, errors) for its lifetime",
}


def modules():
    root = os.path.join(REPO, PACKAGE)
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, REPO)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                yield ".".join(parts), path


def _is_package(dotted):
    return os.path.isdir(os.path.join(REPO, *dotted.split(".")))


def _is_module(dotted):
    base = os.path.join(REPO, *dotted.split("."))
    return os.path.isfile(base + ".py") or os.path.isdir(base)


def module_aliases(tree, module):
    """Local name -> up_trainer module, for every ``import`` of one (anywhere in the file)."""
    package = module if _is_package(module) else module.rsplit(".", 1)[0]
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + ".") and alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(max(node.level - 1, 0)):
                base = base.rsplit(".", 1)[0]
            source = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            if not source.startswith(PACKAGE):
                continue
            for alias in node.names:
                target = f"{source}.{alias.name}"
                if _is_module(target):
                    aliases[alias.asname or alias.name] = target
    return aliases


def assigned_after_import(module, path):
    """(module, name) of every module-level name this file rebinds after import."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    aliases = module_aliases(tree, module)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Global):
                    found.update((module, name) for name in inner.names)
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Attribute) and isinstance(leaf.value, ast.Name) and leaf.value.id in aliases:
                    found.add((aliases[leaf.value.id], leaf.attr))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and \
                node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in aliases:
            name = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else "?"
            found.add((aliases[node.args[0].id], name))
    return found


def test_module_level_state_is_only_the_declared_process_wide_kind():
    found = set()
    for module, path in modules():
        found |= assigned_after_import(module, path)
    undeclared = sorted(found - set(ALLOWED))
    assert not undeclared, ("module-level names assigned after import (hand the value on as a parameter, "
                            f"or declare it in ALLOWED with the reason it is process-wide): {undeclared}")
    stale = sorted(set(ALLOWED) - found)
    assert not stale, f"declared in ALLOWED but no longer assigned after import: {stale}"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_scan_sees_both_forms(tmp_path):
    """A setter with ``global`` and another module's attribute assigned, as the data settings
    were kept before they moved into the DataContext."""
    source = ("from ..data import readers\nfrom . import model_input as mi\n_limit = 1\n\n"
              "def set_limit(v):\n    global _limit\n    _limit = v\n\n"
              "def restore(saved):\n    readers._max_pixels, mi._normalize_on = saved\n"
              "    setattr(readers, '_image_cache', None)\n")
    path = tmp_path / "probe.py"
    path.write_text(source)
    found = assigned_after_import("up_trainer.data.probe", str(path))
    assert found == {("up_trainer.data.probe", "_limit"), ("up_trainer.data.readers", "_max_pixels"),
                     ("up_trainer.data.model_input", "_normalize_on"), ("up_trainer.data.readers", "_image_cache")}
