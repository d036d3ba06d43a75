"""One declaration per config section; validation fills defaults and names bad key paths.

The config reference in docs/config.rst lists exactly these fields (``up config --reference`` prints it).
"""
from ..errors import ConfigError, did_you_mean, join_path, short_repr
from .cache_keys import check_cache_keys
from .worker_limits import check_worker_count

REQUIRED = object()
_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict", type(None): "null"}


class Field:
    def __init__(self, types, default=REQUIRED, doc="", choices=None, minimum=None, alias_of=None, maximum=None):
        self.types = types if isinstance(types, tuple) else (types,)
        self.default = default
        self.doc = doc
        self.choices = choices
        self.minimum = minimum
        self.maximum = maximum
        self.alias_of = alias_of  # UP spelling of another key

    def type_names(self):
        return "/".join(_TYPE_NAMES[t] for t in self.types)

    def check(self, value, path):
        ok = isinstance(value, self.types) and not (isinstance(value, bool) and bool not in self.types)
        if float in self.types and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise ConfigError(path, f"expected {self.type_names()}, got {type(value).__name__} {short_repr(value)}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(path, f"{short_repr(value)} is not one of {', '.join(map(str, self.choices))}",
                              did_you_mean(value, self.choices))
        if self.minimum is not None and isinstance(value, (int, float)) and value < self.minimum:
            raise ConfigError(path, f"must be >= {self.minimum}, got {value}")
        if self.maximum is not None and isinstance(value, (int, float)) and value > self.maximum:
            raise ConfigError(path, f"must be <= {self.maximum}, got {short_repr(value)}")


OPT_STR = (str, type(None))
SEED_MIN, SEED_MAX = -2**63, 2**63 - 1  # torch.manual_seed's range, with room for seed + rank

SCHEMAS = {
    "runtime": {
        "seed": Field(int, 0, "random seed for torch, numpy and python (also seeds data order); a signed 64-bit "
                              "integer", minimum=SEED_MIN, maximum=SEED_MAX),
        "random_seed": Field(int, None, "UP's name for seed", alias_of="seed", minimum=SEED_MIN, maximum=SEED_MAX),
        "device": Field(str, "auto", "auto (cuda when available), cpu or cuda", choices=["auto", "cpu", "cuda"]),
        "fp16": Field(bool, False, "UP switch: float16 autocast + GradScaler (same as amp.enable with dtype float16)"),
        "amp": Field(dict, {}, "{enable: bool, dtype: float16|bfloat16, force: bool}"),
        "deterministic": Field(bool, False, "torch.use_deterministic_algorithms and cudnn.deterministic"),
        "num_threads": Field((int, type(None)), None, "torch intra-op threads (default: torch's choice)", minimum=1),
        "tune_malloc": Field(bool, True, "glibc: keep large freed blocks in the process (mmap threshold 32 MiB, "
                                         "trim threshold 1 GiB) so steps do not page-fault them back"),
        "imports": Field(list, [], "modules imported before building, so their registrations take effect"),
        "max_image_pixels": Field((int, type(None)), 89478485, "largest image (width x height) a data set may "
                                  "decode, a guard against decompression bombs; null: no limit", minimum=1),
        "find_unused_parameters": Field(bool, False, "DDP find_unused_parameters"),
        "sync_bn": Field(bool, False, "convert BatchNorm to SyncBatchNorm under DDP"),
        "dist_timeout": Field((int, float), 1800, "seconds a rank waits for the others before failing", minimum=1),
        "rank_init": Field(bool, True, "seed each process's random streams with seed + rank (UP form default: "
                                       "false, every rank alike, as UP)"),
        "special_bn_init": Field(bool, False, "UP: every BatchNorm gets eps 1e-3 and momentum 0.03 after building"),
        "async_norm": Field(bool, False, "UP: average BatchNorm statistics over ranks before each evaluation "
                                         "(adds a sync_buffers hook with mode mean)"),
        "aligned": Field(bool, False, "UP's +1 pixel box width convention: accepted and recorded, not applied"),
        "task_names": Field((str, list, type(None)), None, "UP: cls or det; recorded (the task follows from the "
                                                         "net and dataset types)"),
        "iter_base": Field(bool, False, "UP: test/save frequencies and starts count iterations (unset ones default "
                                        "to 5000); LR schedule kwargs count updates"),
        "channels_last": Field(bool, False, "model and 4-D image batches in torch.channels_last memory format "
                                            "(faster convolutions with fp16/bf16 on recent GPUs)"),
        "compile": Field((bool, dict), False, "torch.compile the model's forward: true, or a dict of torch.compile "
                                              "kwargs (mode, dynamic, fullgraph, backend, options); checkpoints keep "
                                              "the plain module's keys"),
        "cudnn_benchmark": Field(bool, False, "torch.backends.cudnn.benchmark: time conv algorithms per input shape "
                                              "and keep the fastest (fixed input sizes)"),
    },
    "trainer": {
        "max_epoch": Field((int, float, type(None)), None, "number of epochs (1-based, inclusive); a fraction "
                                                           "trains int(max_epoch x epoch_len) iterations (UP)"),
        "max_iter": Field((int, type(None)), None, "UP: train this many iterations instead (wins over max_epoch); "
                                                   "the last epoch stops early", minimum=1),
        "is_eval": Field(bool, True, "UP: false = never evaluate during training, not even at the end"),
        "test_freq": Field(int, 1, "evaluate every test_freq epochs from test_start", minimum=1),
        "test_start": Field(int, 1, "first epoch that may be evaluated", minimum=1),
        "save_freq": Field(int, 1, "write ckpt_e{e}.pth every save_freq epochs from save_start", minimum=1),
        "save_start": Field(int, 1, "first epoch that may be saved as ckpt_e{e}.pth", minimum=1),
        "save_cur_start": Field(int, -1, "> 0: from this epoch overwrite ckpt_latest.pth every save_cur_freq epochs"),
        "save_cur_freq": Field(int, 1, "interval of the real-time ckpt_latest.pth save", minimum=1),
        "only_save_latest": Field(bool, False, "UP: no ckpt_e{e}.pth files, only ckpt_latest.pth every save_latest_freq epochs"),
        "save_latest_freq": Field(int, 1, "UP: interval for only_save_latest", minimum=1),
        "optimizer": Field(dict, {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}},
                           "{type: any torch.optim class, kwargs}"),
        "lr_scheduler": Field((dict, type(None)), None, "{type, kwargs} plus warmup_* keys; stepped per iteration"),
        "accumulate": Field(int, 1, "gradient accumulation: micro-batches per optimizer update", minimum=1),
        "clip_grad": Field((dict, type(None)), None, "shortcut for a grad_clipper hook: its kwargs"),
    },
    "saver": {
        "save_dir": Field(str, "checkpoints", "checkpoint directory (relative to --work-dir)"),
        "results_dir": Field(str, "results_dir", "evaluation results directory (relative to --work-dir)"),
        "auto_resume": Field(bool, False, "resume from the newest valid checkpoint in save_dir when there is one"),
        "resume_model": Field(OPT_STR, None, "full resume (model, optimizer, epoch, hooks...) from this file"),
        "pretrain_model": Field(OPT_STR, None, "weights only, tolerant: mismatched keys are reported and skipped"),
        "save_result": Field(bool, True, "write evaluation metrics/results files to results_dir"),
        "async_write": Field(bool, True, "write checkpoints on a background thread; training waits only for a CPU copy"),
    },
    "dataset": {
        "train": Field((dict, type(None)), None, "{type, kwargs} (or UP's {dataset: {type, kwargs}})"),
        "test": Field((dict, type(None)), None, "{type, kwargs} (or UP's {dataset: {type, kwargs}})"),
        "batch_size": Field(int, 32, "training batch size per process", minimum=1),
        "test_batch_size": Field((int, type(None)), None, "evaluation batch size (default: batch_size)", minimum=1),
        "num_workers": Field(int, 0, "DataLoader worker processes (at most 4 per CPU, or 32)", minimum=0),
        "pin_memory": Field(bool, False, "DataLoader pin_memory (with CUDA, batches are copied with non_blocking)"),
        "persistent_workers": Field((bool, type(None)), None, "keep the DataLoader worker processes alive from one "
                                    "epoch to the next (needs num_workers > 0); null: on when there are workers and "
                                    "the run trains more than one epoch"),
        "prefetch_factor": Field((int, type(None)), None, "batches each worker loads ahead (DataLoader's default 2 "
                                                          "when null; needs num_workers > 0)", minimum=1),
        "worker_transport": Field(str, "ring", "how worker processes hand batches to the main process: ring "
                                  "(through shared memory reused from batch to batch) or torch (DataLoader's own "
                                  "way, a fresh shared-memory segment per tensor)", choices=["ring", "torch"]),
        "drop_last": Field(bool, False, "drop the last incomplete training batch"),
        "normalize_on": Field(str, "auto", "where the pipeline's final conversion (to float, to_tensor / "
                              "normalize) runs: device (workers send uint8 batches, converted after the copy to "
                              "the device), workers (at the end of each sample's pipeline) or auto (device on an "
                              "accelerator, workers on the CPU)", choices=["auto", "device", "workers"]),
        "cache": Field((str, bool), "none", "decoded images kept for later epochs, once for all workers: none, ram "
                                           "(shared memory) or disk (files in cache_dir); true means ram"),
        "cache_bytes": Field((int, str, type(None)), None, "the cache's budget, bytes or a size like 8GB (default: "
                             "60% of the available memory for ram, the free space for disk); a data set that does "
                             "not fit is refused at start-up"),
        "cache_dir": Field(OPT_STR, None, "cache: disk: directory of the cache files, reused by later runs (relative "
                                          "to --work-dir; default <work dir>/image_cache)"),
        "cache_hash": Field(bool, False, "cache: disk: key each image also by a hash of its file's content (read at "
                                         "every start-up), not only by path, size and mtime"),
        "evaluator": Field((dict, type(None)), None, "{type, kwargs}; default from the task (imagenet / COCO)"),
        "fix_seed": Field(bool, False, "the same shuffled training order every epoch (UP's dist sampler fix_seed)"),
        "aspect_ratio_groups": Field((list, type(None)), None, "training batches hold images of one aspect-ratio "
                                     "group; boundaries on height/width (UP's aspect_grouping, e.g. [1])"),
        "repeat_factor": Field((dict, type(None)), None, "{t, pn, ri_mode, ri_if_empty}: repeat each training "
                                                         "image by its rarest class's factor (UP's repeat_factor "
                                                         "sampler, LVIS style)"),
        "alignment": Field(int, 1, "pad the images of a batch right/bottom to one size, a multiple of this "
                                   "(UP's dataloader alignment)", minimum=1),
        "pad_value": Field((int, float), 0, "value of that padding (UP's pad_value)"),
        "batch_fn": Field((dict, type(None)), None, "{type: batch_mixup|batch_cutmixup, kwargs}: mixes each "
                                                    "training batch (UP's cls_base batch_fn)"),
    },
}

# Sections whose inner structure is checked by the builders that consume them.
FREE_SECTIONS = {"hooks": list, "net": (dict, list), "default_hooks": dict, "ema": dict,
                 "distill": dict,  # read by up_trainer/distill/spec.py (up config builds the teachers)
                 "multitask": dict,  # read by up_trainer/multitask/spec.py
                 "sparsity": dict,  # read by up_trainer/sparsity/spec.py (up config checks it on the net)
                 "quant": dict,  # checked and filled in by config/quant_spec.py (fake quantization, docs/quant.rst)
                 "origin": dict}  # origin: written by the UP translation (config/up_form.py)
SECTIONS = list(SCHEMAS) + list(FREE_SECTIONS)


def validate_section(name, data):
    schema = SCHEMAS[name]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(name, f"expected a mapping, got {type(data).__name__}")
    out = {}
    for key, value in data.items():
        path = join_path(name, key)
        if key not in schema:
            raise ConfigError(path, "unknown key", did_you_mean(key, schema) or f"known keys: {', '.join(schema)}")
        field = schema[key]
        if value is None and type(None) not in field.types and field.default is not REQUIRED:
            value = field.default
        field.check(value, path)
        out[field.alias_of or key] = value
    for key, field in schema.items():
        if field.alias_of:
            continue
        if key not in out:
            if field.default is REQUIRED:
                raise ConfigError(join_path(name, key), "required key is missing")
            out[key] = _copy(field.default)
    return out


def _copy(v):
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


def validate(cfg):
    """Check the top level and every declared section; returns a new, normalized dict."""
    if not isinstance(cfg, dict):
        raise ConfigError(None, "the config must be a mapping of sections")
    for key, value in cfg.items():
        if key not in SECTIONS:
            raise ConfigError(key, "unknown section", did_you_mean(key, SECTIONS) or f"sections: {', '.join(SECTIONS)}")
        if key in FREE_SECTIONS and value is not None and not isinstance(value, FREE_SECTIONS[key]):
            want = FREE_SECTIONS[key]
            names = "/".join(_TYPE_NAMES[t] for t in (want if isinstance(want, tuple) else (want,)))
            raise ConfigError(key, f"expected {names}, got {type(value).__name__}")
    out = {k: v for k, v in cfg.items() if k in FREE_SECTIONS}
    for name in SCHEMAS:
        out[name] = validate_section(name, cfg.get(name))
    _normalize_dataset(out["dataset"])
    if out.get("quant") is not None:
        from .quant_spec import quant_spec

        out["quant"] = quant_spec(out["quant"])
    _check_run_length(out["trainer"], out["runtime"], cfg.get("trainer") or {})
    out.setdefault("hooks", [])
    if out["hooks"] is None:
        out["hooks"] = []
    if "net" not in out or out["net"] is None:
        raise ConfigError("net", "required section is missing", "e.g. net: {type: resnet18, kwargs: {num_classes: 10}}")
    return out


# UP's defaults for the frequencies under runtime.iter_base (they then count iterations).
ITER_BASE_FREQ_DEFAULT = 5000
ITER_BASE_FREQ_KEYS = ("test_freq", "save_freq", "save_latest_freq")


def _check_run_length(trainer, runtime, raw_trainer):
    max_epoch, max_iter = trainer["max_epoch"], trainer["max_iter"]
    if max_epoch is None and max_iter is None:
        raise ConfigError("trainer.max_epoch", "required key is missing", "give max_epoch (or UP's max_iter)")
    if max_epoch is not None and not max_epoch > 0:
        raise ConfigError("trainer.max_epoch", f"must be > 0, got {max_epoch}")
    if isinstance(max_epoch, float) and max_epoch.is_integer():
        trainer["max_epoch"] = int(max_epoch)
    if runtime["iter_base"]:
        for key in ITER_BASE_FREQ_KEYS:
            if raw_trainer.get(key) is None:
                trainer[key] = ITER_BASE_FREQ_DEFAULT


def _normalize_dataset(ds):
    """UP's split and loader forms were translated before validation (config/up_dataset.py)."""
    for split in ("train", "test"):
        entry = ds.get(split)
        if isinstance(entry, dict) and "dataset" in entry and "type" not in entry:
            raise ConfigError(f"dataset.{split}", "UP's {dataset: {type, kwargs}} form is read by resolve_config")
    groups = ds["aspect_ratio_groups"]
    if groups is not None and (not groups or not all(isinstance(g, (int, float)) and not isinstance(g, bool)
                                                     and g > 0 for g in groups)):
        raise ConfigError("dataset.aspect_ratio_groups", f"expected a list of positive ratios, got {groups!r}")
    if ds["repeat_factor"] is not None:
        from .repeat_factor import check_repeat_factor

        ds["repeat_factor"] = check_repeat_factor(ds["repeat_factor"])
    if ds["train"] is None and ds["test"] is None:
        raise ConfigError("dataset", "needs at least one of train / test")
    check_cache_keys(ds)
    check_worker_count(ds["num_workers"])
    for key in ("persistent_workers", "prefetch_factor"):
        if ds[key] not in (None, False) and ds["num_workers"] == 0:
            raise ConfigError(f"dataset.{key}", "needs worker processes", "set dataset.num_workers > 0")


def reference_rows():
    """(section, key, types, default, doc) for the config reference (docs/config.rst)."""
    for section, schema in SCHEMAS.items():
        for key, f in schema.items():
            default = "required" if f.default is REQUIRED else repr(f.default)
            yield section, key, f.type_names(), default, f.doc
