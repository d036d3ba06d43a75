"""Several tasks trained together on one net: the ``multitask`` section (spec.py).

:func:`attach_tasks` is what the builder calls for a multitask run: it reads the section, sets
the net's task heads, builds each task's data, loaders and evaluator, and hands back the
loaders (:mod:`.loaders`: one batch per task per step) and the evaluator (:mod:`.evaluation`:
each task on its own data, metrics prefixed by task) the trainer runs with.
:func:`check_multitask` checks the same without reading data (``up config``).
"""
from ..errors import ConfigError, join_path
from .spec import read_tasks, resolve_heads

SECTION_LOADER_KEYS = ("batch_size", "drop_last", "aspect_ratio_groups", "alignment", "pad_value", "evaluator")
BEST_HOOK = "auto_save_best_multitask"


def dataset_entry(entry):
    """A multitask.datasets section as a DATASETS entry ({type, kwargs})."""
    return {k: v for k, v in entry.items() if k not in SECTION_LOADER_KEYS}


def section_path(name):
    return f"dataset.{name}" if name in ("train", "test") else join_path("multitask.datasets", name)


def _check_roles(tasks):
    for task in tasks:
        if task.train == "test":
            raise ConfigError(join_path(task.path, "train"), "dataset.test is evaluation data",
                              "train on dataset.train or a section of multitask.datasets")
        if task.test == "train":
            raise ConfigError(join_path(task.path, "test"), "dataset.train is training data", "evaluate on "
                              "dataset.test or a section of multitask.datasets")


def _check_best_hook(cfg, tasks):
    """auto_save_best_multitask tracks evaluated tasks only: a task without test data has no
    key metric, and its best checkpoint would never be written."""
    names = {t.name: t for t in tasks}
    for i, hook in enumerate(cfg.get("hooks") or []):
        if not isinstance(hook, dict) or hook.get("type") != BEST_HOOK:
            continue
        tracked = (hook.get("kwargs") or {}).get("tasks") or list(names)
        path = join_path(join_path("hooks", i), "kwargs.tasks")
        for name in tracked if isinstance(tracked, list) else ():
            if name not in names:
                raise ConfigError(path, f"no task {name!r}", f"tasks: {', '.join(names)}")
            if names[name].test is None and (hook.get("kwargs") or {}).get("tasks"):
                raise ConfigError(path, f"task {name!r} has no test data, so no evaluator and no key metric to keep "
                                  f"its best by ({names[name].path}.test is null)",
                                  f"give {names[name].path}.test a data section, or leave {name} out")


def _check_net(model, tasks):
    """The net's heads for each task (names), its task norms' task count and world size."""
    from ..protocols import RunsTasks

    if not isinstance(model, RunsTasks):
        raise ConfigError("net", "the net has no task heads: a multitask run needs a net with a head per task",
                          "UP's form: heads wrapped in multitask_wrapper (docs/up/multitask.rst)")
    heads = resolve_heads(tasks, model.head_names)
    count = model.norm_task_count
    if count is not None and count < len(tasks):
        raise ConfigError("net", f"task_sync_bn keeps statistics for {count} task(s) (its task_num) but "
                          f"multitask has {len(tasks)}", f"set task_num: {len(tasks)} in the norm's kwargs")
    return heads


def check_multitask(cfg, check_dataset):
    """``up config``: the section, its data sections (``check_dataset(entry, path)``) and
    evaluators, the net's heads (on the meta device), without reading data."""
    import torch

    from ..registry import EVALUATORS
    from ..tasks.net import build_model

    tasks, sections = read_tasks(cfg)
    _check_roles(tasks)
    _check_best_hook(cfg, tasks)
    for name, entry in sections.items():
        if name in ("train", "test"):
            continue
        check_dataset(dataset_entry(entry), section_path(name))
        if entry.get("evaluator") is not None:
            EVALUATORS.build(entry["evaluator"], join_path(section_path(name), "evaluator"))
    with torch.device("meta"):
        model = build_model(cfg["net"])
    _check_net(model, tasks)


def _evaluator(entry, dataset, path):
    from ..protocols import LoadsFiles, ReadsInputs
    from ..registry import EVALUATORS

    ev_cfg = entry.get("evaluator") or getattr(dataset, "default_evaluator", None) or {"type": "imagenet"}
    evaluator = EVALUATORS.build(ev_cfg, join_path(path, "evaluator"))
    if isinstance(evaluator, ReadsInputs):
        evaluator.read_inputs()
    if isinstance(evaluator, LoadsFiles):
        evaluator.load_files()
    return evaluator


def _check_classes(model, task, heads, dataset, path):
    """A classification head must have an output for every class of its task's data."""
    for head in heads:
        module = getattr(model, head, None)
        predicted, held = getattr(module, "num_classes", None), getattr(dataset, "num_classes", None)
        if isinstance(predicted, int) and isinstance(held, int) and held > predicted:
            raise ConfigError(getattr(module, "num_classes_path", "net"), f"the {head} head predicts {predicted} "
                              f"classes but {path} (task {task.name}) has {held}", f"set it to {held}")


def attach_tasks(cfg, model, loaders, evaluator, schedule, context, dist, training, build_dataset):
    """(loaders, evaluator) of a multitask run; the net is set to its tasks' heads. The data
    sections are built with ``build_dataset(entry, path, context)`` (the builder's)."""
    from ..data.validation import require_training_data
    from .evaluation import MultiTaskEvaluator, TaskEvaluation
    from .loaders import MultiTaskLoaders, TaskData, task_factory

    tasks, sections = read_tasks(cfg)
    _check_roles(tasks)
    _check_best_hook(cfg, tasks)
    heads = _check_net(model, tasks)
    if dist.world_size > 1 and model.norm_task_count is not None:
        raise ConfigError("net", "task_sync_bn on several processes is not built: its per-task statistics would have "
                          "to be synchronised in per-task groups, and plain SyncBatchNorm would mix the tasks'",
                          "train on one process, or use sync_bn (statistics shared by the tasks)")
    model.use_tasks([t.name for t in tasks], heads, [t.loss_weight for t in tasks])
    model.set_task(0)
    ds_cfg, seed, built = cfg["dataset"], cfg["runtime"]["seed"], {}

    def dataset(name):
        if name == "train":
            return loaders.train_set
        if name == "test":
            return loaders.test_set
        if name not in built:
            built[name] = build_dataset(dataset_entry(sections[name]), section_path(name), context)
        return built[name]

    task_data, evaluations = [], []
    for task, task_heads in zip(tasks, heads):
        train_factory = test_factory = None
        if training and task.train != "train":
            data = dataset(task.train)
            require_training_data(data, section_path(task.train))
            _check_classes(model, task, task_heads, data, section_path(task.train))
            train_factory = task_factory(ds_cfg, sections[task.train], data, seed + task.index, dist, context, True)
            train_factory.follow(schedule)
            if train_factory.epoch_len() == 0:  # nothing to cycle through: refused before the first step
                raise ConfigError(join_path(section_path(task.train), "batch_size"), f"{len(data)} samples over "
                                  f"{dist.world_size} process(es) fill no batch of {train_factory.cfg['batch_size']} "
                                  "with drop_last", "lower batch_size or drop_last: false")
        if task.test is not None:
            data = dataset(task.test)
            if task.test == "test":
                task_evaluator = evaluator
            else:
                test_factory = task_factory(ds_cfg, sections[task.test], data, seed, dist, context, False)
                test_factory.follow(schedule)
                task_evaluator = _evaluator(sections[task.test], data, section_path(task.test))
            evaluations.append(TaskEvaluation(task, test_factory, task_evaluator))
        task_data.append(TaskData(task, train_factory, test_factory))
    return MultiTaskLoaders(loaders, task_data), (MultiTaskEvaluator(evaluations) if evaluations else None)
