"""Hooks talk to the run through declared channels only: events, the trainer's and the
checkpoint policy's setters, ``trainer.scalars``, ``trainer.checkpoints.request``. No hook
assigns an attribute (or an item) of the trainer or of what it holds (state, checkpoint
policy, loaders, store, model) except the few fields the trainer declares for hooks to set.

An AST scan of up_trainer/hooks/*.py: inside each function, ``trainer`` (a parameter) and
``self.trainer`` are the roots, and a local name bound to a chain from a root
(``st = trainer.state``) or to what a call given a root returns (``model = self._model(trainer)``)
is one too, unless the call is a copy (``copy.deepcopy``, ``dict``, ``list``)."""
import ast
import os

from conftest import REPO

HOOKS_DIR = os.path.join(REPO, "up_trainer", "hooks")

# Trainer fields declared for hooks to set (up_trainer/engine/trainer.py says who reads them).
DECLARED = {
    "trainer.stop_training": "early_stopping ends the run after this epoch's end work",
    "trainer.interrupted": "an on_exception hook names the TrainingInterrupted to end with",
    "trainer.ema": "the EMA feature hands the trainer what it saves under ckpt['ema']",
}
COPIES = {"deepcopy", "copy", "dict", "list", "tuple", "len", "str", "int", "float", "bool", "sorted"}


def _is_self_trainer(node):
    return (isinstance(node, ast.Attribute) and node.attr == "trainer" and isinstance(node.value, ast.Name)
            and node.value.id == "self")


def _root_of(node, roots):
    """The root name ('trainer', or a local alias) an attribute/item chain hangs from, else None."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if _is_self_trainer(node):
            return "trainer"
        node = node.value
    if isinstance(node, ast.Name) and node.id in roots:
        return roots[node.id]
    if isinstance(node, ast.Call):
        return _call_root(node, roots)
    return None


def _call_root(call, roots):
    """A call handed a root returns something of the run (``self._model(trainer)``), unless it copies."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    if name in COPIES:
        return None
    if isinstance(call.func, ast.Attribute):  # trainer.loaders.get(...) is of the run too
        owner = _root_of(call.func.value, roots)
        if owner:
            return owner
    for arg in list(call.args) + [k.value for k in call.keywords]:
        if _root_of(arg, roots):
            return f"{ast.unparse(call)}"
    return None


def _chain(node, roots):
    """The assigned chain written from its root: ``st.epoch_len`` -> ``trainer.state.epoch_len``."""
    text = ast.unparse(node)
    head = node
    while isinstance(head, (ast.Attribute, ast.Subscript)) and not _is_self_trainer(head):
        head = head.value
    if _is_self_trainer(head):
        return "trainer" + text[len("self.trainer"):]
    if isinstance(head, ast.Name) and head.id in roots and roots[head.id] != head.id:
        return roots[head.id] + text[len(head.id):]
    return text


def assignments_to_the_run(source, filename="<hook>"):
    """``(line, chain)`` of every assignment to an attribute or item of the run in ``source``."""
    found = []
    for fn in ast.walk(ast.parse(source, filename)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        roots = {a.arg: a.arg for a in args if a.arg == "trainer"}
        nodes = list(ast.walk(fn))
        for _ in range(3):  # aliases of aliases
            for n in nodes:
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                    root = _root_of(n.value, roots)
                    if root:
                        roots.setdefault(n.targets[0].id, _chain(n.value, roots) if root == "trainer" else root)
        for n in nodes:
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                        if isinstance(e, (ast.Attribute, ast.Subscript)) and _root_of(e, roots):
                            found.append((n.lineno, _chain(e, roots)))
            elif (isinstance(n, ast.Call) and getattr(n.func, "id", None) in ("setattr", "delattr") and n.args
                  and _root_of(n.args[0], roots)):
                found.append((n.lineno, f"{n.func.id}({_chain(n.args[0], roots)}, ...)"))
    return sorted(set(found))


def undeclared_assignments(hooks_dir=HOOKS_DIR):
    out = []
    for f in sorted(os.listdir(hooks_dir)):
        if f.endswith(".py"):
            path = os.path.join(hooks_dir, f)
            for line, chain in assignments_to_the_run(open(path, encoding="utf-8").read(), path):
                if chain not in DECLARED:
                    out.append(f"hooks/{f}:{line}: {chain}")
    return out


def test_hooks_assign_only_declared_fields_of_the_run():
    assert undeclared_assignments() == []


def test_the_scan_follows_aliases_and_calls():
    source = '''
class H:
    def before_train(self, trainer):
        st = trainer.state
        st.epoch_len = 3
        loaders = trainer.loaders
        loaders.train_entry = {}
        model = self._model(trainer)
        model.use_l1 = True
        trainer.schedule.save_freq = 2
        self.trainer.checkpoints.keep = 1
        setattr(trainer.loaders, "on_train_loader", None)
        entry = dict(trainer.loaders.train_entry)
        entry["kwargs"] = {}
        self.best, trainer.stop_training = 1, True
        trainer.checkpoints.set_keep(1)
'''
    chains = [c for _, c in assignments_to_the_run(source)]
    assert chains == ["trainer.state.epoch_len", "trainer.loaders.train_entry", "self._model(trainer).use_l1",
                      "trainer.schedule.save_freq", "trainer.checkpoints.keep",
                      "setattr(trainer.loaders, ...)", "trainer.stop_training"]
