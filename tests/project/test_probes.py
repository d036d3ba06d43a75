"""Every optional member one part of the package looks for on another is declared in
up_trainer/protocols.py: a probe ``getattr(obj, "name", default)`` or ``hasattr(obj, "name")``
uses a declared name, or one of the few names below that belong to other libraries' objects."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "up_trainer")

# Members of objects that are not ours: what torch, torchvision, the standard library and the
# command-line and logging libraries may or may not have (by version, platform or wrapper).
THIRD_PARTY = {
    # torch: DDP and torch.compile wrappers, versions, internals of DataLoader workers
    "module", "_orig_mod", "no_sync", "compile", "_foreach_norm", "get_total_norm", "clip_grads_with_norm_",
    "get_crc32_options", "accelerator", "_storage_Use_Count", "_worker_info", "_workers", "_iterator",
    "_shutdown_workers", "_worker_pids_set", "detach", "numpy", "item", "ndim", "type", "weight", "bias",
    "inplace",
    # torchvision: detectors, their transform, v2 ops and ResNet blocks
    "roi_heads", "score_thresh", "fixed_size", "canvas_size", "conv1", "conv3", "bn3", "layer1", "_is_cn",
    # the standard library: signals, os, exceptions, namedtuples, threading.local
    "SIGSTOP", "SIGCHLD", "pthread_sigmask", "register_at_fork", "strerror", "reason", "_fields", "active",
    "__module__", "__qualname__",  # any Python object (a registry names the class it refuses)
    # PyYAML's errors, click's errors, IPython's shell, TensorBoard's event writer
    "problem_mark", "problem", "ctx", "kernel", "_file_name",
}

# An object's look at its own optional parts (``hasattr(self, "drop")``) hands nothing on:
# probes on ``self`` are not counted.


def declared_names():
    tree = ast.parse(open(os.path.join(PACKAGE, "protocols.py"), encoding="utf-8").read())
    names = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for item in cls.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.FunctionDef):
                names.add(item.name)
    return names


def probes(path):
    """(line, attribute name) of every getattr-with-default / hasattr whose name is a literal."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        wanted = {"getattr": 3, "hasattr": 2}.get(node.func.id)
        if wanted is None or len(node.args) != wanted:
            continue
        obj, name = node.args[0], node.args[1]
        if isinstance(obj, ast.Name) and obj.id == "self":
            continue
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            yield node.lineno, name.value


def all_probes():
    for dirpath, _, files in os.walk(PACKAGE):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                for line, name in probes(path):
                    yield f"{os.path.relpath(path, ROOT)}:{line}", name


def test_every_probe_uses_a_declared_name():
    declared = declared_names()
    undeclared = [f"{where} probes {name!r}" for where, name in all_probes()
                  if name not in declared and name not in THIRD_PARTY]
    assert not undeclared, ("declare these members in up_trainer/protocols.py (or, for another library's "
                            "object, in THIRD_PARTY here):\n" + "\n".join(undeclared))


def test_the_scan_sees_probes(tmp_path):
    """The scan finds a probe of each form, and skips non-literal names and ``self``."""
    src = tmp_path / "m.py"
    src.write_text("getattr(a, 'x', None)\nhasattr(b, 'y')\ngetattr(c, name, None)\n"
                   "getattr(d, 'z')\nhasattr(self, 'w')\n")
    assert list(probes(str(src))) == [(1, "x"), (2, "y")]


def test_the_allow_list_holds_no_declared_name():
    """A name both declared and listed as another library's would hide a missing declaration."""
    assert not THIRD_PARTY & declared_names()


def test_every_declared_member_is_held_by_some_object_of_the_package():
    """A declaration nothing defines any more (a method renamed on its class) would leave its
    callers silently skipping the step: each declared name is defined outside protocols.py."""
    import re

    sources = []
    for dirpath, _, files in os.walk(PACKAGE):
        sources += [open(os.path.join(dirpath, f), encoding="utf-8").read() for f in files
                    if f.endswith(".py") and os.path.join(dirpath, f) != os.path.join(PACKAGE, "protocols.py")]
    text = "\n".join(sources)
    unheld = [name for name in sorted(declared_names())
              if not re.search(rf"def {name}\b|\.{name}\s*=[^=]|^\s+{name}\s*[:=][^=]|\b{name}=", text, re.M)]
    assert not unheld, f"declared in protocols.py but defined nowhere: {unheld}"


def test_the_package_objects_have_the_capabilities_their_callers_check():
    """The evaluators, data sets and ops the builder and loaders hand on pass the checks that
    replaced the attribute probes (a renamed method would fail here, not skip a step)."""
    from up_trainer import protocols as p
    from up_trainer.data.model_input import FinalConversion
    from up_trainer.tasks.cls.datasets import ClsDatasetBase
    from up_trainer.tasks.cls.evaluator import LongTailAccuracy, TopKAccuracy
    from up_trainer.tasks.det.datasets import DetDataset
    from up_trainer.tasks.det.evaluator import CocoEvaluator
    from up_trainer.tasks.det.lvis_evaluator import LvisEvaluator
    from up_trainer.tasks.det.transforms import KeepRatioResize

    assert issubclass(FinalConversion, p.ConvertsIn) and issubclass(FinalConversion, p.UsesContext)
    for dataset in (DetDataset, ClsDatasetBase):
        assert issubclass(dataset, p.ConvertsIn) and issubclass(dataset, p.Relabels)
        assert issubclass(dataset, p.ListsImageFiles)
    assert issubclass(DetDataset, p.PerBatch) and not issubclass(ClsDatasetBase, p.PerBatch)
    assert issubclass(KeepRatioResize, p.PerBatch)
    assert issubclass(TopKAccuracy, p.HasHeads) and issubclass(TopKAccuracy, p.WritesInsight)
    assert issubclass(LongTailAccuracy, p.LoadsFiles) and not issubclass(TopKAccuracy, p.LoadsFiles)
    assert issubclass(LvisEvaluator, p.ReadsInputs) and not issubclass(CocoEvaluator, p.ReadsInputs)
    assert issubclass(CocoEvaluator, p.WritesInsight)
