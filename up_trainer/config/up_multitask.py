"""UP's multitask runner (``runtime.runner: {type: multitask}`` + ``multitask_cfg``) translated
into the native ``multitask`` section (up_trainer/multitask/spec.py).

UP's runner reads ``multitask_cfg.task_names`` (task i's name), ``datasets.train`` /
``datasets.test`` (task i's data: the names of ``dataset`` sections; ``''`` = not evaluated),
``model_idxs`` (a norm index per task apart from the head index) and ``debug``; ``notions``
only holds YAML anchors. Heads carry ``multitask_wrapper`` with the task indices they run
for. Here: ``dataset.train`` / ``dataset.test`` stay where they are, every other section a task
names moves to ``multitask.datasets`` (its UP loader keys translated as dataset.train's are),
sections no task names are dropped (UP builds only the data its runner names), and task i runs
the branches whose ``idxs`` hold i (all of them when a wrapper gives none). No torch import.
"""
from ..errors import ConfigError, did_you_mean, join_path
from .up_dataset import native_pipeline_key, translate_dataset

CFG_KEYS = ("notions", "datasets", "task_names", "debug", "model_idxs")


def _runner(cfg):
    rt = cfg.get("runtime")
    runner = rt.get("runner") if isinstance(rt, dict) else None
    return runner.get("type") if isinstance(runner, dict) else runner


def _fp16(cfg, notes):
    """UP's ``runtime.fp16: {keep_batchnorm_fp32, scale_factor}`` switches fp16 on (UP tests the
    mapping's truth); on torch's backend both keys are linklink's and have no effect."""
    rt = cfg.get("runtime")
    if isinstance(rt, dict) and isinstance(rt.get("fp16"), dict):
        options = rt["fp16"]
        rt["fp16"] = bool(options)
        notes.append(f"runtime.fp16: {options!r} read as {bool(options)} (UP: the options keep_batchnorm_fp32 and "
                     "scale_factor are its linklink backend's; torch's GradScaler scales dynamically)")


def _section(ds, name, role, notes):
    """dataset.<name> (UP split form) as a native multitask.datasets entry."""
    entry = ds.get(name)
    tmp = {"dataset": {role: entry}}
    local = []
    translate_dataset(tmp, local)
    native_pipeline_key(tmp, local)
    flat = tmp["dataset"]
    out = dict(flat[role])
    size = flat.get("batch_size" if role == "train" else "test_batch_size")
    if size is not None:
        out["batch_size"] = size
    for key in ("drop_last", "aspect_ratio_groups", "alignment", "pad_value", "evaluator"):
        if flat.get(key) is not None:
            out[key] = flat[key]
    for key in ("num_workers", "pin_memory"):
        if key in flat and ds.get(key, flat[key]) != flat[key]:
            notes.append(f"dataset.{name}: {key} {flat[key]!r} differs from the training loader's; one value "
                         "(dataset's) serves every task")
    notes.extend(n.replace(f"dataset.{role}", f"dataset.{name}").replace(
        "moved to dataset.evaluator", f"moved to multitask.datasets.{name}.evaluator") for n in local)
    return out


def _list(value, path):
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(path, f"expected a list of dataset section names, got {value!r}")
    return value


def translate_multitask(cfg, notes):
    """Rewrite UP's multitask keys into ``multitask`` (in place); other runners pass through."""
    _fp16(cfg, notes)
    if _runner(cfg) != "multitask":
        if "multitask_cfg" in cfg:
            raise ConfigError("multitask_cfg", "is read by UP's multitask runner only",
                              "runtime.runner: {type: multitask}")
        return
    cfg["runtime"].pop("runner")
    mcfg = cfg.pop("multitask_cfg", None)
    if not isinstance(mcfg, dict):
        raise ConfigError("multitask_cfg", "UP's multitask runner needs multitask_cfg {task_names, datasets}")
    for key in mcfg:
        if key not in CFG_KEYS:
            raise ConfigError(join_path("multitask_cfg", key), "is not read by UP's multitask runner",
                              did_you_mean(key, CFG_KEYS) or f"known: {', '.join(CFG_KEYS)}")
    if mcfg.get("model_idxs"):
        raise ConfigError("multitask_cfg.model_idxs", "UP's norm index per task apart from its head index is not "
                          "mapped", "leave it out: task i normalises with task_sync_bn's statistics i")
    names = mcfg.get("task_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError("multitask_cfg.task_names", f"expected a list of task names, got {names!r}")
    datasets = mcfg.get("datasets")
    if not isinstance(datasets, dict):
        raise ConfigError("multitask_cfg.datasets", "expected {train: [sections], test: [sections]}")
    train = _list(datasets.get("train"), "multitask_cfg.datasets.train")
    test = _list(datasets.get("test", []), "multitask_cfg.datasets.test")
    for key, given in (("train", train), ("test", test)):
        if len(given) != len(names):
            raise ConfigError(f"multitask_cfg.datasets.{key}", f"{len(given)} sections for {len(names)} tasks "
                              f"({', '.join(names)})", "one section per task, in task_names' order ('' for none "
                              "in test)")
    ds = cfg.get("dataset") if isinstance(cfg.get("dataset"), dict) else {}
    extra, tasks = {}, []
    for i, name in enumerate(names):
        task = {"name": name, "train": train[i], "test": test[i] or None}
        for role, section in (("train", train[i]), ("test", test[i])):
            where = f"multitask_cfg.datasets.{role}[{i}]"
            if not section or section in ("train", "test"):
                continue
            if section not in ds:
                raise ConfigError(where, f"no dataset section {section!r}",
                                  did_you_mean(section, list(ds)) or f"dataset sections: {', '.join(ds)}")
            if section not in extra:
                extra[section] = _section(ds, section, role, notes)
        tasks.append(task)
    for section in [k for k in ds if k not in ("train", "test", "batch_sampler", "dataloader") and isinstance(
            ds[k], dict) and "dataset" in ds[k]]:
        if section not in extra:
            notes.append(f"dataset.{section}: no task names it in multitask_cfg.datasets; not built (as in UP)")
        ds.pop(section)
    heads = branch_tasks(cfg.get("net"))
    for i, task in enumerate(tasks):
        if heads is not None:
            task["heads"] = [h for h, idxs in heads if not idxs or i in idxs]
            if not task["heads"]:
                raise ConfigError("net", f"no head runs for task {i} ({task['name']}): no multitask_wrapper's idxs "
                                  f"holds {i}", f"add {i} to the idxs of its head's multitask_wrapper")
    for head, idxs in heads or ():
        unused = [i for i in idxs if i >= len(tasks)]
        if unused and len(unused) == len(idxs):
            notes.append(f"net: {head} runs for task(s) {idxs}, none of this run's {len(tasks)} ({', '.join(names)}); "
                         "its weights stay as initialised or loaded")
    cfg["multitask"] = {"tasks": tasks, "datasets": extra}
    if mcfg.get("debug"):
        notes.append("multitask_cfg.debug: UP's per-forward log lines are not written")
    notes.append(f"runtime.runner: multitask -> multitask section: tasks {', '.join(names)}; each step sums every "
                 "task's losses over one batch of each (UP)")


def branch_tasks(net):
    """[(branch name, idxs)] of a net list's multitask_wrapper branches, or None without any."""
    if not isinstance(net, list):
        return None
    from .up_multitask_branches import is_multitask_net, split_branches

    if not is_multitask_net(net):
        return None
    for i, entry in enumerate(net):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigError(join_path("net", i), "expected a mapping {name, type, kwargs}")
    _, branches = split_branches(net, "net")
    return [(name, idxs) for name, _, idxs in branches]
