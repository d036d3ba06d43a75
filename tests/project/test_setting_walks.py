"""Three settings walked from where they enter to where they act, one straight path down the
layers each (no module reaching up into a higher room for a helper and coming back):

- ``saver.save_dir`` (and every config path): run_paths.RunPaths.of -> paths.resolve_path, the
  one path rule, which the builder, the dry run, run.py and export read too;
- ``dataset.cache``: engine/builder -> data/image_cache.open_image_cache -> config/cache_keys;
- ``trainer.max_epoch``: engine/schedule.Schedule -> engine/run_length.RunLength.
"""
import ast

from test_import_layers import PACKAGE, REPO, import_graph, layer_of, modules

# module -> the modules its setting's walk may enter (its own layer and below are checked too)
WALKS = {
    f"{PACKAGE}.run_paths": {f"{PACKAGE}.paths", f"{PACKAGE}.registry"},
    f"{PACKAGE}.data.image_cache": None,
    f"{PACKAGE}.engine.schedule": None,
    f"{PACKAGE}.engine.run_length": None,
}


def definitions(root, name):
    """Modules of the package that define a function ``name`` (module level or in a class)."""
    found = []
    for module, path in modules(root).items():
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        if any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(tree)):
            found.append(module)
    return sorted(found)


def test_the_path_rule_is_defined_once_in_the_lowest_room_that_can_hold_it():
    assert definitions(REPO, "resolve_path") == [f"{PACKAGE}.paths"]


def bad_steps(graph, walks=WALKS):
    """``module -> dep`` for each import of a walk's module that climbs a layer or leaves its list."""
    bad = []
    for module, allowed in walks.items():
        for dep in sorted(graph.get(module, ())):
            if layer_of(dep) > layer_of(module) or (allowed is not None and dep not in allowed):
                bad.append(f"{module} -> {dep}")
    return bad


def test_each_walk_goes_down_only():
    assert bad_steps(import_graph(REPO)) == []


def test_the_walk_check_sees_a_room_reached_into(tmp_path):
    """The path rule as it stood in the builder: run_paths reached up into engine/ for it."""
    pkg = tmp_path / PACKAGE
    (pkg / "engine").mkdir(parents=True)
    for f in ("__init__.py", "paths.py", "engine/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "engine" / "builder.py").write_text("def resolve_path(path, work_dir):\n    return path\n")
    (pkg / "run_paths.py").write_text("from .engine.builder import resolve_path\n")
    graph = import_graph(str(tmp_path))
    assert bad_steps(graph) == [f"{PACKAGE}.run_paths -> {PACKAGE}.engine.builder"]
    assert definitions(str(tmp_path), "resolve_path") == [f"{PACKAGE}.engine.builder"]
