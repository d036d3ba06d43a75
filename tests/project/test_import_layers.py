"""The import graph of up_trainer: every import, module-level or inside a function, runs down
the layers or within one, and no module imports itself back through others.

Layers, lowest first. A module may import its own layer and the ones below, never above:

0. errors                       what a user did wrong, as exceptions
1. registry, config, exits, paths, atomic
                                names -> builders; YAML -> validated dict; the exit-code policy;
                                opening user-named inputs and guarding outputs; the one
                                atomic file write
2. weights, integrity, render, data, memckpt, writers, plot
                                tools with no notion of a training run
3. tasks, quant                 models, datasets, evaluators, transforms (know nothing of training);
                                fake quantization inserted into a built net
4. engine, distill, multitask,  trainer, hook dispatch, checkpoints, optimization, the builder;
   sparsity                     teachers and mimic losses hooked onto the student; the tasks of
                                a multitask run; weight masks
5. hooks                        every feature of a run, on top of the engine's events
6. run, run_paths, run_lock, predict, flops, export, api
                                what the commands do (where a run writes, its directory
                                locks); the Python API over them
7. cli, click_errors, __main__  the `up` command

Across the layers runs one more boundary: UP's dialect. The modules that read UP's form
(config/up_*, tasks/up_nets, engine/up_*) are imported only by each other and by the
translation entry points below; everything else sees native structures and never asks which
dialect a run came from.
"""
import ast
import os
import re

from conftest import REPO

PACKAGE = "up_trainer"
LAYERS = [
    ["errors", ""],  # "" is the package itself (its __init__: the version)
    ["registry", "config", "exits", "paths", "atomic", "protocols"],
    ["weights", "pretrained", "integrity", "render", "data", "memckpt", "writers", "plot"],
    ["tasks", "tta", "quant"],
    ["engine", "distill", "multitask", "sparsity"],
    ["hooks"],
    ["run", "run_paths", "run_lock", "run_reuse", "run_dirs", "run_summary", "oneline", "predict", "flops", "export",
     "api"],
    ["cli", "cli_options", "cli_data", "cli_weights", "click_errors", "__main__"],
]


def modules(root):
    """{dotted name: file} of every module of the package under ``root``."""
    out = {}
    for dirpath, _, files in os.walk(os.path.join(root, PACKAGE)):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def imports_of(name, path, known):
    """Package modules ``name`` imports anywhere in its file (function bodies included)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    here = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:  # `from . import schedule` names a module, not an attribute
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m != name}


def layer_of(module):
    top = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module} is in no layer: add its top-level name to LAYERS in this test")


# The package re-exports the Python API (``up_trainer.train``, ...) through a PEP 562
# ``__getattr__``: the import runs at the first use of a name, never while a module of the
# package is being imported, so it is no edge of the import graph.
PUBLIC_FACE = {PACKAGE: {f"{PACKAGE}.api"}}


def import_graph(root):
    known = modules(root)
    return {name: imports_of(name, path, known) - PUBLIC_FACE.get(name, set()) for name, path in known.items()}


def upward_imports(graph):
    return sorted(f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
                  for a, deps in graph.items() for b in deps if layer_of(b) > layer_of(a))


def cycles(graph):
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


UP_FORM = re.compile(rf"^{PACKAGE}\.(config\.up_\w+|tasks\.up_nets(\.\w+)?|engine\.up_\w+)$")
# module -> why it may hand UP's form to the modules that read it
TRANSLATION_ENTRY_POINTS = {
    f"{PACKAGE}.config": "resolve_config translates a file into the native form (config/up_form.py)",
    f"{PACKAGE}.tasks.net": "build_model and check_net hand a UP net list to its reader (tasks/up_nets)",
}


# Crossings not yet moved behind the translation, each with what keeps it. The list only
# shrinks: a new crossing fails, and so does one that is gone but still listed here.
KNOWN_CROSSINGS = {
    f"{PACKAGE}.engine.lr_schedulers imports {PACKAGE}.engine.up_lr_schedulers":
        "CosineAnnealingLR with kwargs.warmup_iter (UP's shifted cosine) is read by the engine",
    f"{PACKAGE}.engine.optim imports {PACKAGE}.engine.up_param_groups":
        "optimizer.register_type: yolov5 is read by the engine",
    f"{PACKAGE}.engine.param_groups imports {PACKAGE}.engine.up_param_groups":
        "optimizer.pconfig (UP's parameter groups) is read by the engine",
}


def up_boundary_crossings(graph):
    return sorted(f"{a} imports {b}" for a, deps in graph.items() for b in deps
                  if UP_FORM.match(b) and not UP_FORM.match(a) and a not in TRANSLATION_ENTRY_POINTS)


def test_every_module_has_a_layer():
    for name in modules(REPO):
        layer_of(name)


def test_no_import_runs_upward():
    assert upward_imports(import_graph(REPO)) == []


def test_no_import_cycles():
    assert cycles(import_graph(REPO)) == []


def test_only_the_translation_imports_up_form_modules():
    crossings = up_boundary_crossings(import_graph(REPO))
    assert [c for c in crossings if c not in KNOWN_CROSSINGS] == []
    assert [c for c in KNOWN_CROSSINGS if c not in crossings] == [], "moved: drop it from KNOWN_CROSSINGS"


def test_the_up_boundary_check_sees_a_crossing(tmp_path):
    pkg = tmp_path / PACKAGE
    for sub in ("engine", "config", "tasks/up_nets"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "tasks" / "__init__.py").write_text("")
    (pkg / "config" / "__init__.py").write_text("from .up_form import translate\n")
    (pkg / "config" / "up_form.py").write_text("from .up_dataset import x\n")
    (pkg / "config" / "up_dataset.py").write_text("x = 1\n")
    (pkg / "engine" / "builder.py").write_text("def f():\n    from ..tasks.up_nets import is_up_net\n")
    (pkg / "engine" / "optim.py").write_text("from . import up_param_groups\n")
    (pkg / "engine" / "up_param_groups.py").write_text("")
    assert up_boundary_crossings(import_graph(str(tmp_path))) == [
        f"{PACKAGE}.engine.builder imports {PACKAGE}.tasks.up_nets",
        f"{PACKAGE}.engine.optim imports {PACKAGE}.engine.up_param_groups"]


def test_the_checks_see_function_local_imports(tmp_path):
    """The checks themselves: a deferred upward import and a circle are both caught."""
    pkg = tmp_path / PACKAGE
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "a.py").write_text("def f():\n    from ..cli import main\n")
    (pkg / "cli.py").write_text("from .run import go\n")
    (pkg / "run.py").write_text("def go():\n    from .engine import a\n")
    graph = import_graph(str(tmp_path))
    assert upward_imports(graph) == [f"{PACKAGE}.engine.a (layer 4) imports {PACKAGE}.cli (layer 7)"]
    assert cycles(graph) == [[f"{PACKAGE}.cli", f"{PACKAGE}.engine.a", f"{PACKAGE}.run"]]


def test_old_import_paths_still_resolve():
    """Plugins and scripts written against the paths before the moves keep working."""
    from up_trainer.cli import run_safely
    from up_trainer.engine import checkpoint, hooks, schedule
    from up_trainer.exits import run_safely as policy
    from up_trainer.hooks.base import Hook, HookList
    from up_trainer.weights import load_weights

    assert (Hook, HookList) == (hooks.Hook, hooks.HookList)
    assert run_safely is policy and checkpoint.load_weights is load_weights
    assert schedule.should_save(3, {"max_epoch": 3})


CITED_FILE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:md|rst|py))\b")


def test_sources_cite_only_files_in_the_tree():
    """A file named in a docstring or comment (README.rst, engine/scalars.py) exists: at the
    repository root, in the package, or beside the file citing it."""
    missing = []
    for top in (PACKAGE, "benchmarks", "scripts"):
        for dirpath, _, files in os.walk(os.path.join(REPO, top)):
            for f in files:
                if not f.endswith(".py"):
                    continue
                text = open(os.path.join(dirpath, f), encoding="utf-8").read()
                for cited in set(CITED_FILE.findall(text)):
                    if "/" not in cited and not cited.endswith((".md", ".rst")):
                        continue  # a bare module name (foo.py) is too often an example
                    where = [REPO, os.path.join(REPO, PACKAGE), dirpath]
                    if not any(os.path.exists(os.path.join(base, cited)) for base in where):
                        missing.append(f"{os.path.relpath(os.path.join(dirpath, f), REPO)}: {cited}")
    assert missing == []


DET_FAMILIES = ("atss", "fcos", "onenet", "rcnn", "yolov5", "yolov6", "yolox")  # up_trainer/tasks/det/<family>/: one detector family each
FAMILY_OF = re.compile(rf"^{PACKAGE}\.tasks\.det\.({'|'.join(DET_FAMILIES)})(\.|$)")


def family_crossings(graph):
    """Imports from one detection family's package into another's: shared code belongs in
    tasks/det (box_ops, simota, transform_ops), where every family imports it from."""
    out = []
    for a, deps in graph.items():
        fa = FAMILY_OF.match(a)
        for b in deps:
            fb = FAMILY_OF.match(b)
            if fa and fb and fa.group(1) != fb.group(1):
                out.append(f"{a} imports {b}")
    return sorted(out)


def copied_functions(root):
    """Functions with the same body (AST, docstring left out) in two detection families."""
    import ast

    seen, out = {}, []
    for family in DET_FAMILIES:
        folder = os.path.join(root, PACKAGE, "tasks", "det", family)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
            if not name.endswith(".py"):
                continue
            tree = ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    body = node.body[1:] if ast.get_docstring(node) else node.body
                    if len(body) < 2:
                        continue  # one-liners (a return of a constant) say too little
                    key = ast.dump(ast.Module(body=body, type_ignores=[]))
                    where = f"{family}/{name}:{node.name}"
                    other = seen.setdefault(key, where)
                    if other != where and other.split("/")[0] != family:
                        out.append(f"{where} repeats {other}")
    return out


def test_detection_families_import_no_other_family():
    assert family_crossings(import_graph(REPO)) == []


def test_no_function_is_copied_between_detection_families():
    assert copied_functions(REPO) == []


def test_the_family_checks_see_a_crossing_and_a_copy(tmp_path):
    det = tmp_path / PACKAGE / "tasks" / "det"
    body = "def iou(a, b):\n    c = a * b\n    return c / (a + b - c)\n"
    for family in ("atss", "yolox"):
        (det / family).mkdir(parents=True)
        (det / family / "__init__.py").write_text("")
    for init in (tmp_path / PACKAGE, det.parent, det):
        (init / "__init__.py").write_text("")
    (det / "yolox" / "losses.py").write_text(body)
    (det / "atss" / "losses.py").write_text("from ..yolox.losses import iou\n" + body)
    assert family_crossings(import_graph(str(tmp_path))) == [
        f"{PACKAGE}.tasks.det.atss.losses imports {PACKAGE}.tasks.det.yolox.losses"]
    assert copied_functions(str(tmp_path)) == ["yolox/losses.py:iou repeats atss/losses.py:iou"]


def test_every_import_of_the_package_resolves():
    """Relative imports inside functions run only when called: one that counts its dots wrong
    after a move (``from ...data`` one folder deeper) fails here, not in a user's run."""
    known = modules(REPO)
    graph = import_graph(REPO)
    assert sorted(f"{a} imports {b}" for a, deps in graph.items() for b in deps if b not in known) == []


def test_the_layout_page_names_every_layer_room_and_module():
    """docs/layout.rst shows the layers as LAYERS has them, every folder of the package and
    every top-level module: a room added without a line there fails here."""
    doc = open(os.path.join(REPO, "docs", "layout.rst"), encoding="utf-8").read()
    root = os.path.join(REPO, PACKAGE)
    missing = [f"layer {i}: {name}" for i, names in enumerate(LAYERS) for name in names
               if name and f"``{name}``" not in doc]
    for entry in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, entry)) and os.path.exists(os.path.join(root, entry, "__init__.py")):
            if f"``{PACKAGE}/{entry}``" not in doc:
                missing.append(f"folder {PACKAGE}/{entry}")
        elif entry.endswith(".py") and f"``{entry}``" not in doc:
            missing.append(f"module {entry}")
    assert missing == []
