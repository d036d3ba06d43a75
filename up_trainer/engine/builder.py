"""Build a ready-to-run Trainer from a validated config, and pick what to resume from."""
import logging
import os

import torch

from ..config.redact import remember_secrets
from ..data.context import DataContext
from ..data.packed_records import PackedIndex
from ..data.label_map import one_label_map
from ..data.validation import require_training_data
from ..errors import CheckpointError, ConfigError, join_path
from ..paths import resolve_path
from ..protocols import (ChecksBatchSize, ChecksPretrained, HasHeads, LoadsFiles, ReadsInputs, SavesScores,
                         TranslatesUpWeights, UsesContext)
from ..registry import DATASETS, EVALUATORS, HOOKS, import_user_modules
from .allocator import tune_malloc
from ..weights import load_fitting, load_weights, match_prefixes
from .checkpoint import CheckpointStore, load_checkpoint
from .distributed import DistInfo
from .rng import seed_everything
from .speed import batch_memory_format, prepare_model, set_backend_flags

log = logging.getLogger("up")


def pick_device(flag, runtime_cfg):
    choice = flag or runtime_cfg["device"]
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError("runtime.device" if not flag else "--device", "cuda requested but no CUDA device is available")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda":
        # device = local rank; modulo because SLURM may show each task only its own GPU(s)
        local_rank = int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count()
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def build_dataset(entry, path, context=None):
    """The data set of a config entry, reading and converting as ``context`` (the run's
    DataContext, data/context.py) says; None: the defaults (conversion on the device, no cache,
    Pillow's default pixel limit), whatever an earlier run in this process used."""
    if entry is None:
        return None
    from ..tasks.transforms import build_transforms  # noqa: F401  (registers transform names)

    dataset = DATASETS.build(entry, path)
    if isinstance(dataset, PackedIndex):  # loader workers share the records instead of copying them
        dataset.pack_records()
    if isinstance(dataset, UsesContext):  # our datasets: pixel limit, cache, where their model-input step runs
        dataset.use_context(context if context is not None else DataContext())
    return dataset


def log_data_summary(datasets):
    """One line per dataset read from files (counts, empty classes, skipped bad records, boxes
    on the border; tasks/data_check.py), so a silently broken label set shows in train.log."""
    from ..tasks.data_check import summary_line

    for path, dataset in datasets:
        line = summary_line(dataset, path) if dataset is not None else None
        if line:
            log.info(line)


def build_hooks(entries, path="hooks"):
    from .hook_keys import entry_keys
    from .hooks import HookList, parse_priority

    hooks = HookList()
    first_at = {}  # hook class -> path of its first entry
    classes = []
    for i, entry in enumerate(entries):
        p = join_path(path, i)
        if not isinstance(entry, dict):
            raise ConfigError(p, f"expected a {{type, kwargs}} mapping, got {type(entry).__name__}")
        cls = None
        if isinstance(entry.get("type"), str):  # a second instance is refused before any is built
            cls = HOOKS.get(entry["type"], join_path(p, "type"))
            if cls in first_at and not cls.allow_multiple:
                raise ConfigError(p, f"{entry['type']} is listed twice (first at {first_at[cls]}); it cannot run "
                                  "twice in one run", "keep one entry (`up hooks` says which hooks may repeat)")
            first_at.setdefault(cls, p)
        classes.append(cls)
    keys = entry_keys(entries, classes, path)  # the checkpoint key of each: never its position
    for i, (entry, key) in enumerate(zip(entries, keys)):
        p = join_path(path, i)
        prio = parse_priority(entry["priority"], join_path(p, "priority")) if "priority" in entry else None
        hook = HOOKS.build({k: v for k, v in entry.items() if k != "name"}, p)
        hooks.add(hook, priority=prio, name=key, type_name=entry["type"])
    return hooks


def build_evaluator(cfg, test_set):
    ev_cfg = cfg["dataset"].get("evaluator")
    if ev_cfg is None:
        ev_cfg = getattr(test_set, "default_evaluator", None) or {"type": "imagenet"}
    evaluator = EVALUATORS.build(ev_cfg, "dataset.evaluator")
    if isinstance(evaluator, ReadsInputs):  # files it needs at evaluation, checked before training
        evaluator.read_inputs()
    heads = getattr(test_set, "num_classes", None)
    if isinstance(heads, list) and isinstance(evaluator, HasHeads):  # list labels: one classifier head each
        evaluator.set_heads(len(heads))
    if getattr(test_set, "save_score", False) and isinstance(evaluator, SavesScores):
        evaluator.save_scores = True
    if isinstance(evaluator, LoadsFiles):
        evaluator.load_files()
    return evaluator


def build_trainer(cfg, *, work_dir=None, device=None, with_optim=True):
    """Everything a run needs, constructed in an order that keeps RNG use deterministic."""
    from ..data.image_cache import open_image_cache
    from ..data.loader import LoaderFactory
    from ..quant import apply_quant
    from ..tasks.net import build_model, check_net
    from .optim import Optimization
    from .run_length import check_epoch_len
    from .schedule import Schedule
    from .trainer import Trainer

    rt = cfg["runtime"]
    remember_secrets(cfg)  # every rank: its log lines and errors redact them from here on
    import_user_modules(rt["imports"])
    if rt["num_threads"]:
        torch.set_num_threads(rt["num_threads"])
    if rt["tune_malloc"]:
        tune_malloc()
    if rt["deterministic"]:
        # cuBLAS is reproducible only with a fixed workspace; without it torch refuses CUDA matmuls
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    set_backend_flags(rt)
    dist = DistInfo()
    rank_seed = rt["seed"] + (dist.rank if rt["rank_init"] else 0)
    seed_everything(rank_seed)
    device = pick_device(device, rt)
    hooks = build_hooks(cfg["hooks"])  # first: a hook typo fails before any slow work
    check_net(cfg["net"])

    ds = cfg["dataset"]
    context = DataContext.from_config(cfg, device)  # the run's data settings, handed to every data set it builds
    train_set = build_dataset(ds["train"], "dataset.train", context)
    if with_optim and train_set is not None:
        require_training_data(train_set, "dataset.train")  # labels to learn from (data/validation)
    test_set = build_dataset(ds["test"], "dataset.test", context)
    class_names = one_label_map(train_set, [("dataset.test", test_set)])  # every split on train's classes
    log_data_summary((("dataset.train", train_set), ("dataset.test", test_set)))
    evaluator = build_evaluator(cfg, test_set) if test_set is not None else None
    # before any loader: forked workers inherit the data sets, their context and the cache's one arena
    cache = open_image_cache(ds, [("dataset.train", train_set), ("dataset.test", test_set)],
                             resolve_path(ds["cache_dir"] or "image_cache", work_dir), dist.rank, dist.world_size)
    if cache is not None:
        context = context.with_cache(cache)
        for dataset in (train_set, test_set):
            if isinstance(dataset, UsesContext):
                dataset.use_context(context)
    loaders = LoaderFactory(ds, train_set, test_set, rt["seed"], dist.rank, dist.world_size, context)
    training = with_optim and train_set is not None
    if training:  # a data set that fills no batch is refused at start-up, before the slow work
        check_epoch_len(loaders, ds, dist.world_size)
    # The run's one schedule (length, frequencies), sized by the training epoch's batches; the
    # loaders' persistent-workers default reads its epoch count (a single epoch when not training).
    schedule = Schedule.of_run(cfg, loaders.epoch_len()) if training else Schedule({"max_epoch": 1}, 1)
    loaders.follow(schedule)

    fill_class_count(cfg["net"], train_set if train_set is not None else test_set)
    seed_everything(rt["seed"])  # identical initial weights on every rank
    model = build_model(cfg["net"])
    if training and isinstance(model, ChecksBatchSize):  # a pretraining queue tiled by the batch (tasks/ssl)
        model.check_batch_size(cfg["dataset"]["batch_size"], dist.world_size)
    if rt["special_bn_init"]:
        special_bn_init(model)
    apply_quant(model, cfg)  # fake quantization (quant/): before the optimizer, EMA and DDP see the net
    model = prepare_model(model.to(device), rt)
    check_class_count(model, cfg["net"], (("dataset.train", train_set), ("dataset.test", test_set)))
    if cfg.get("multitask") is not None:  # several tasks on the net: their loaders and evaluators (multitask/)
        from ..multitask import attach_tasks

        loaders, evaluator = attach_tasks(cfg, model, loaders, evaluator, schedule, context, dist, training,
                                          build_dataset)
    if with_optim and train_set is not None and cfg.get("distill") is not None:  # teachers hook the bare student (distill/)
        from ..distill import attach_distillation

        hooks.add(attach_distillation(cfg, model, device, batch_memory_format(rt),
                                      lambda p: resolve_path(p, work_dir)), name="distill")
    if training and cfg.get("sparsity") is not None:  # weight masks kept through training (sparsity/)
        from ..sparsity import attach_sparsity

        attach_sparsity(cfg, model, hooks)
    optim = None
    if training:
        optim = Optimization(model, cfg["trainer"], rt, device, schedule,
                             batch_size=cfg["dataset"]["batch_size"], world_size=dist.world_size)
    elif with_optim:
        raise ConfigError("dataset.train", "training needs a train dataset")
    if dist.enabled:
        model = wrap_ddp(model, device, rt)
    seed_everything(rank_seed)
    save_dir = resolve_path(cfg["saver"]["save_dir"], work_dir)
    trainer = Trainer(cfg=cfg, model=model, optim=optim, loaders=loaders, schedule=schedule, evaluator=evaluator,
                      hooks=hooks, store=CheckpointStore(save_dir, cfg["saver"]["async_write"]), device=device, dist=dist,
                      run_dir=work_dir or os.getcwd(), results_dir=resolve_path(cfg["saver"]["results_dir"], work_dir))
    trainer.class_names = class_names
    return trainer


def fill_class_count(net_cfg, dataset):
    """A detection net whose kwargs leave ``num_classes`` out gets the count of the data's
    classes (written into the config, so config.yaml and the checkpoints record it)."""
    from ..tasks.det.datasets import DetDataset

    if not isinstance(net_cfg, dict) or not isinstance(dataset, DetDataset) or not isinstance(net_cfg.get("type"), str):
        return
    kwargs = net_cfg.get("kwargs") if isinstance(net_cfg.get("kwargs"), dict) else None
    if kwargs is not None and "num_classes" in kwargs:
        return
    from ..registry import MODELS, public_params

    if "num_classes" not in dict(public_params(MODELS.get(net_cfg["type"], "net.type"))):
        return
    net_cfg["kwargs"] = dict(kwargs or {}, num_classes=dataset.num_classes)
    log.info("net.kwargs.num_classes: %d, from the data's classes (%s)", dataset.num_classes,
             ", ".join(map(str, dataset.classes[:20])) + (", ..." if dataset.num_classes > 20 else ""))


def check_class_count(model, net_cfg, datasets):
    """The net must have an output for every class the data holds: caught here, not as an
    IndexError mid-training (for detection, only when a high label first comes up)."""
    predicted = getattr(model, "num_classes", None)
    key = getattr(model, "num_classes_path", None) or (  # a UP net says where its count is
        "net[0].kwargs.num_classes" if isinstance(net_cfg, list) else "net.kwargs.num_classes")
    if isinstance(predicted, list) or any(isinstance(getattr(d, "num_classes", None), list) for _, d in datasets):
        from ..tasks.cls.multi_head import check_head_counts

        return check_head_counts(predicted, key, datasets)
    if not isinstance(predicted, int):
        return  # a composed or user net that does not say
    for path, dataset in datasets:
        held = getattr(dataset, "num_classes", None)
        if not isinstance(held, int):
            continue
        if held > predicted:
            wanted = held + 1 if getattr(model, "num_classes_counts_background", False) else held  # UP's count
            raise ConfigError(key, f"the net predicts {predicted} classes but {path} has {held}",
                              f"set {key}: {wanted}")
        if held < predicted:
            log.warning("%s: the net predicts %d classes, %s has %d (the extra outputs never see a label)",
                        key, predicted, path, held)


def special_bn_init(model):
    """UP's runtime.special_bn_init: every BatchNorm gets eps 1e-3 and momentum 0.03."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.eps, m.momentum = 1e-3, 0.03


def _sync_bn_group(group_size):
    """The process group of this rank for SyncBatchNorm: all processes (None) unless UP's
    ``group_size`` splits them into consecutive groups of that many ranks."""
    import torch.distributed as tdist

    world = tdist.get_world_size()
    if not group_size or group_size >= world:
        return None
    if world % group_size:
        raise ConfigError("net[0].kwargs.normalize.kwargs.group_size", f"{group_size} does not divide the "
                          f"{world} processes")
    mine = None
    for start in range(0, world, group_size):  # every rank creates every group, in the same order
        group = tdist.new_group(list(range(start, start + group_size)))
        if start <= tdist.get_rank() < start + group_size:
            mine = group
    return mine


def wrap_ddp(model, device, rt):
    group_size = getattr(model, "sync_bn_group_size", None)  # a UP net's normalize: sync_bn
    if rt["sync_bn"] or group_size is not None:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model, _sync_bn_group(group_size))
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids,
                                                     find_unused_parameters=rt["find_unused_parameters"])


def restore(trainer, resume=None, work_dir=None):
    """Apply the resume rules: --resume > auto_resume > resume_model > pretrain_model."""
    saver = trainer.cfg["saver"]
    if trainer.dist.is_main:
        trainer.store.remove_stale_temp_files()
    if resume:
        return _full_resume(trainer, resume, "--resume")
    if saver["auto_resume"]:
        path, ckpt = trainer.store.find_resumable()
        if ckpt is not None:
            try:
                trainer.load_checkpoint(ckpt, path)
            except CheckpointError as exc:  # never a silent fresh start over a run that exists
                raise CheckpointError(f"auto_resume: {exc}; if the config changed on purpose, train in "
                                      "another --work-dir or saver.save_dir") from None
            return path
        log.info("auto_resume: no checkpoint in %s, starting fresh", trainer.store.save_dir)
    if saver["resume_model"]:
        return _full_resume(trainer, resolve_path(saver["resume_model"], work_dir), "saver.resume_model")
    if saver["pretrain_model"]:
        path = resolve_path(saver["pretrain_model"], work_dir)
        load_pretrained(trainer.module, path)
        return None
    return None


def _full_resume(trainer, path, source):
    try:
        ckpt = load_checkpoint(path)
    except CheckpointError as exc:
        raise CheckpointError(f"{source}: {exc}") from None
    try:
        trainer.load_checkpoint(ckpt, path)
    except CheckpointError as exc:
        raise CheckpointError(f"{source}: {exc}") from None
    return path


def load_pretrained(module, path):
    """Weights only, tolerant: every skipped or mismatched key is reported."""
    try:
        weights = load_weights(path)
    except CheckpointError as exc:
        raise CheckpointError(f"saver.pretrain_model: {exc}") from None
    weights = match_prefixes(weights, module.state_dict())
    if isinstance(module, TranslatesUpWeights):  # a UP net: UP's parameter names too
        weights = module.translate_up_weights(weights)
    report = load_fitting(module, weights, f"pretrain_model {path}")
    if isinstance(module, ChecksPretrained):  # UP's freeze_patterns: the frozen part must have loaded
        module.check_pretrained(report, f"saver.pretrain_model: {path}")
    return report
