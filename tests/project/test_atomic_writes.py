"""Every file up_trainer writes whole goes through one atomic write (up_trainer/atomic.py):
temp file in the same directory, flush + fsync, os.replace, fsync of the directory. A direct
``open(path, "w")`` would leave half a file under the final name when the process dies or
the disk fills mid-write; this scan fails on any new one."""
import ast
import os

import pytest

from conftest import REPO

PACKAGE = os.path.join(REPO, "up_trainer")

# Opens for writing that are not a whole file replaced. Each says why.
ALLOWED = {
    ("paths.py", "wb"),  # the output guard's probe: written, synced and removed at once
    ("writers/run_files.py", "a"),  # appending(): cut back to its start size on failure
    ("tasks/det/convert.py", "x"),  # exclusive create into a fresh output tree: never over a file
    ("data/formats/labelme.py", "wb"),  # an image embedded in a LabelMe file, extracted once to a new name
    # write_results(results, path): ``path`` is the temp file run.write_eval_results got from replacing()
    ("tasks/cls/evaluator.py", "w"),
    ("tasks/det/evaluator.py", "w"),
}


def temp_names(tree):
    """Names bound by ``with replacing(...) as name`` (atomic.replacing or run_files.replacing)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                func = getattr(call, "func", None)
                called = getattr(func, "id", None) or getattr(func, "attr", None)
                if called == "replacing" and isinstance(item.optional_vars, ast.Name):
                    names.add(item.optional_vars.id)
    return names


def write_opens():
    """(file relative to up_trainer, mode, line) of every open(..., mode) that writes."""
    found = []
    for dirpath, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, PACKAGE).replace(os.sep, "/")
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            temps = temp_names(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open":
                    if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in temps:
                        continue  # the temp file of a `with replacing(...) as tmp` block
                    mode = node.args[1] if len(node.args) > 1 else next(
                        (k.value for k in node.keywords if k.arg == "mode"), None)
                    if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                        found.append((rel, mode.value, node.lineno))
    return found


def test_every_whole_file_write_goes_through_the_atomic_helper():
    direct = [f"up_trainer/{rel}:{line} open(..., {mode!r})" for rel, mode, line in write_opens()
              if (rel, mode) not in ALLOWED]
    assert direct == [], "write through up_trainer.atomic (replacing / opened / write_json) instead"


def test_the_scan_sees_writes():
    assert ("paths.py", "wb") in {(rel, mode) for rel, mode, _ in write_opens()}


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    from up_trainer import atomic

    path = tmp_path / "predictions.jsonl"
    atomic.write_text(path, "old\n")
    with pytest.raises(RuntimeError):
        with atomic.opened(path) as f:
            f.write("half a li")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["predictions.jsonl"]


def test_a_write_is_synced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    from up_trainer import atomic

    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.path.isdir(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", None)), real_replace(a, b))[1])
    atomic.write_json(tmp_path / "report.json", {"a": 1})
    assert events == [("fsync", False), ("replace", None), ("fsync", True)]
    assert (tmp_path / "report.json").read_text() == '{"a": 1}'
