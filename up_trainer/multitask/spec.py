"""The native ``multitask`` section: several tasks trained together on one net.

::

    multitask:
      tasks:                       # task i is the i-th entry
        - name: det
          train: train             # a data section: train / test (dataset.train / dataset.test)
          test: test               #   or a key of multitask.datasets; test: null = not evaluated
          heads: [roi_head]        # the net's branches this task runs (names or indices); default: all
          loss_weight: 1.0         # this task's losses are scaled by it before the sum
        - {name: cls, train: train_cls, test: test_cls, heads: [cls_head]}
      datasets:                    # more data sections: {type, kwargs} plus their own loader keys
        train_cls: {type: cls, kwargs: {...}, batch_size: 128}
        test_cls: {type: cls, kwargs: {...}, batch_size: 128, evaluator: {type: imagenet}}

One training step takes one batch of every task's training data, runs each task's forward,
sums every task's (weighted) losses and makes one update. An epoch is dataset.train's batches
(the data of one task); the other tasks' loaders cycle through their data as often as that
takes. No torch import here.
"""
from ..errors import ConfigError, did_you_mean, join_path

TASK_KEYS = ("name", "train", "test", "heads", "loss_weight")
SECTION_KEYS = ("type", "kwargs", "batch_size", "drop_last", "aspect_ratio_groups", "alignment", "pad_value",
                "evaluator")
MAIN_SECTIONS = ("train", "test")  # dataset.train / dataset.test


class Task:
    def __init__(self, index, name, train, test, heads, loss_weight, path):
        self.index, self.name, self.train, self.test = index, name, train, test
        self.heads, self.loss_weight, self.path = heads, loss_weight, path


def _mapping(value, path):
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
    return value


def read_sections(mt, dataset):
    """{section name: entry} of every data section a task may name."""
    datasets = _mapping(mt.get("datasets") or {}, "multitask.datasets")
    sections = {name: dataset[name] for name in MAIN_SECTIONS if dataset.get(name) is not None}
    for name, entry in datasets.items():
        path = join_path("multitask.datasets", name)
        if name in MAIN_SECTIONS:
            raise ConfigError(path, f"{name} is dataset.{name}'s name", "give this section another name")
        _mapping(entry, path)
        for key in entry:
            if key not in SECTION_KEYS:
                raise ConfigError(join_path(path, key), "unknown key",
                                  did_you_mean(key, SECTION_KEYS) or f"known keys: {', '.join(SECTION_KEYS)}")
        if not isinstance(entry.get("type"), str):
            raise ConfigError(join_path(path, "type"), "required string is missing", "e.g. type: cls")
        size = entry.get("batch_size", 1)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(join_path(path, "batch_size"), f"expected a positive integer, got {size!r}")
        sections[name] = entry
    return sections


def _section(value, path, sections, role):
    if not isinstance(value, str):
        raise ConfigError(path, f"expected the name of a data section, got {value!r}")
    if value not in sections:
        raise ConfigError(path, f"no data section {value!r}", did_you_mean(value, list(sections))
                          or f"sections: {', '.join(sections) or 'none'} (dataset.train / dataset.test, or a key "
                          f"of multitask.datasets)")
    return value


def read_tasks(cfg):
    """(tasks, sections) of a resolved config's ``multitask`` section; ConfigError on any misfit."""
    mt = _mapping(cfg["multitask"], "multitask")
    for key in mt:
        if key not in ("tasks", "datasets"):
            raise ConfigError(join_path("multitask", key), "unknown key",
                              did_you_mean(key, ["tasks", "datasets"]) or "known keys: tasks, datasets")
    sections = read_sections(mt, cfg["dataset"])
    entries = mt.get("tasks")
    if not isinstance(entries, list) or not entries:
        raise ConfigError("multitask.tasks", "expected a non-empty list of {name, train, test, heads}")
    tasks, names = [], []
    for i, entry in enumerate(entries):
        path = join_path("multitask.tasks", i)
        _mapping(entry, path)
        for key in entry:
            if key not in TASK_KEYS:
                raise ConfigError(join_path(path, key), "unknown key",
                                  did_you_mean(key, TASK_KEYS) or f"known keys: {', '.join(TASK_KEYS)}")
        for key in ("name", "train", "test"):
            if key not in entry:
                raise ConfigError(join_path(path, key), "required key is missing",
                                  "test: null trains the task without evaluating it" if key == "test" else None)
        name = entry["name"]
        if not isinstance(name, str) or not name.isidentifier() or name in names:
            raise ConfigError(join_path(path, "name"), f"{name!r} is not a unique identifier")
        names.append(name)
        train = _section(entry["train"], join_path(path, "train"), sections, "train")
        test = entry["test"]
        if test is not None:
            test = _section(test, join_path(path, "test"), sections, "test")
        heads = entry.get("heads")
        if heads is not None and (not isinstance(heads, list) or not heads or not all(
                isinstance(h, (str, int)) and not isinstance(h, bool) for h in heads)):
            raise ConfigError(join_path(path, "heads"), f"expected a non-empty list of head names or indices, "
                              f"got {heads!r}")
        weight = entry.get("loss_weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
            raise ConfigError(join_path(path, "loss_weight"), f"expected a number >= 0, got {weight!r}")
        tasks.append(Task(i, name, train, test, heads, float(weight), path))
    if "train" not in [t.train for t in tasks] and cfg["dataset"].get("train") is not None:
        raise ConfigError("multitask.tasks", "no task trains on dataset.train, whose batches make the epoch",
                          "name train as one task's training data")
    return tasks, sections


def resolve_heads(tasks, head_names):
    """Each task's heads as names of the net's branches (``head_names``, in order)."""
    out = []
    for task in tasks:
        if task.heads is None:
            out.append(list(head_names))
            continue
        heads = []
        for j, head in enumerate(task.heads):
            path = join_path(join_path(task.path, "heads"), j)
            if isinstance(head, int):
                if not 0 <= head < len(head_names):
                    raise ConfigError(path, f"head index {head} is out of range: the net has {len(head_names)} "
                                      f"heads ({', '.join(head_names)})")
                head = head_names[head]
            elif head not in head_names:
                raise ConfigError(path, f"the net has no head {head!r}",
                                  did_you_mean(head, head_names) or f"heads: {', '.join(head_names)}")
            heads.append(head)
        out.append(heads)
    return out
