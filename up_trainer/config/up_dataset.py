"""UP's dataset section -> native dataset keys.

UP writes each split as ``{dataset: {type, kwargs}, batch_sampler: {...}, dataloader: {...}}``
and may put ``batch_sampler`` / ``dataloader`` next to the splits, shared by both. Native form
keeps the split's ``{type, kwargs}`` and flat loader keys:

=====================================================  ==========================================
UP                                                     native ``dataset`` key
=====================================================  ==========================================
train ``batch_sampler.kwargs.batch_size``              ``batch_size``
test ``batch_sampler.kwargs.batch_size``               ``test_batch_size``
``batch_sampler.kwargs.sampler: {type: dist}``         (our sampler: seeded, sharded, resumable)
``sampler: {type: repeat_factor, kwargs}`` (train)     ``repeat_factor`` (the kwargs)
``sampler.kwargs.fix_seed``                            ``fix_seed``
``aspect_ratio_group`` + ``aspect_grouping``           ``aspect_ratio_groups`` (training batches)
``dataloader.kwargs.num_workers`` / ``pin_memory``     ``num_workers`` / ``pin_memory``
``dataloader.kwargs.alignment`` / ``pad_value``        ``alignment`` / ``pad_value``
``dataloader.kwargs.batch_fn`` (``cls_base``)          ``batch_fn``
=====================================================  ==========================================

A split's own ``batch_sampler``/``dataloader`` wins over the shared one. Values UP lets differ
per split but we hold once (num_workers, pin_memory) come from the training split; a differing
evaluation value is recorded as a note. Unknown types and keys are one-line errors.
"""
from ..errors import ConfigError, did_you_mean, join_path

SPLITS = ("train", "test")
BATCH_SAMPLER_TYPES = ("base", "aspect_ratio_group")
SAMPLER_TYPES = ("dist",)
DATALOADER_TYPES = ("base", "cls_base")
PAD_TYPES = ("batch_pad",)
BATCH_SAMPLER_KEYS = ("sampler", "batch_size", "aspect_grouping", "drop_last")
DATALOADER_KEYS = ("num_workers", "pin_memory", "alignment", "pad_value", "pad_type", "worker_init", "batch_fn")
UNMAPPED_SAMPLERS = {
    "local": "UP's per-process sampler without sharding",
}


def _mapping(value, path):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping {{type, kwargs}}, got {type(value).__name__}")
    return value


def _check_entry(entry, path, types, keys):
    for key in entry:
        if key not in ("type", "kwargs"):
            raise ConfigError(join_path(path, key), "unknown key", did_you_mean(key, ["type", "kwargs"]))
    kind = entry.get("type", types[0])
    if kind not in types:
        raise ConfigError(join_path(path, "type"), f"unknown type {kind!r}",
                          did_you_mean(kind, types) or f"UP types accepted here: {', '.join(types)}")
    kwargs = _mapping(entry.get("kwargs"), join_path(path, "kwargs"))
    for key in kwargs:
        if key not in keys:
            raise ConfigError(join_path(path, f"kwargs.{key}"), "unknown key",
                              did_you_mean(key, keys) or f"accepted: {', '.join(keys)}")
    return kind, kwargs


def _sampler(kwargs, path, split, ds, notes):
    sampler = _mapping(kwargs.get("sampler"), join_path(path, "kwargs.sampler"))
    spath = join_path(path, "kwargs.sampler")
    kind = sampler.get("type", "dist")
    if kind == "repeat_factor":
        if split != "train":
            raise ConfigError(join_path(spath, "type"), "repeat_factor repeats training images; an evaluation "
                              "split sees each image once", "use type: dist")
        for key in sampler:
            if key not in ("type", "kwargs"):
                raise ConfigError(join_path(spath, key), "unknown key", "expected {type, kwargs}")
        ds["repeat_factor"] = dict(_mapping(sampler.get("kwargs"), join_path(spath, "kwargs")))
        return
    if kind in UNMAPPED_SAMPLERS:
        raise ConfigError(join_path(spath, "type"), f"{kind!r} is {UNMAPPED_SAMPLERS[kind]}, which is not mapped",
                          "use type: dist (seeded, sharded, resumable)")
    _, skw = _check_entry(sampler, spath, SAMPLER_TYPES, ("fix_seed",))
    if split == "train" and "fix_seed" in skw:
        ds["fix_seed"] = skw["fix_seed"]


def _batch_sampler(entry, path, split, ds, notes):
    kind, kwargs = _check_entry(entry, path, BATCH_SAMPLER_TYPES, BATCH_SAMPLER_KEYS)
    _sampler(kwargs, path, split, ds, notes)
    if "batch_size" in kwargs:
        ds["batch_size" if split == "train" else "test_batch_size"] = kwargs["batch_size"]
    if "drop_last" in kwargs and split == "train":
        ds["drop_last"] = kwargs["drop_last"]
    if kind == "aspect_ratio_group":
        if "aspect_grouping" not in kwargs:
            raise ConfigError(join_path(path, "kwargs.aspect_grouping"), "required by aspect_ratio_group",
                              "e.g. aspect_grouping: [1]")
        if split == "train":
            ds["aspect_ratio_groups"] = kwargs["aspect_grouping"]
        # Evaluation batches are grouped only to save padding in UP; every image is seen once either way.
    elif "aspect_grouping" in kwargs:
        raise ConfigError(join_path(path, "kwargs.aspect_grouping"), "only type aspect_ratio_group takes it")


def _dataloader(entry, path, split, ds, notes):
    kind, kwargs = _check_entry(entry, path, DATALOADER_TYPES, DATALOADER_KEYS)
    shared = not path.startswith(f"dataset.{split}.")
    if kwargs.get("pad_type") == "center_pad":  # the one other pad_type in UP's files: its YOLOv5 ones
        notes.append(f"{path}.kwargs.pad_type: center_pad (UP's YOLOv5 centred batch padding) pads at the bottom and "
                     "right here, as every detector of this project does; boxes stay in image pixels either way")
    elif kwargs.get("pad_type", "batch_pad") not in PAD_TYPES:
        raise ConfigError(join_path(path, "kwargs.pad_type"), f"unknown pad_type {kwargs['pad_type']!r}",
                          f"accepted: {', '.join(PAD_TYPES)}")
    if "batch_fn" in kwargs:
        if kind != "cls_base":
            raise ConfigError(join_path(path, "kwargs.batch_fn"), "only the cls_base dataloader takes batch_fn")
        if split == "train":
            ds["batch_fn"] = kwargs["batch_fn"]
        elif not shared:
            raise ConfigError(join_path(path, "kwargs.batch_fn"), "batch_fn mixes training batches; "
                              "an evaluation loader cannot take one")
    if kwargs.get("worker_init"):
        notes.append(f"{path}.kwargs.worker_init: not needed (every batch is seeded by seed, epoch and position)")
    for key in ("num_workers", "pin_memory", "alignment", "pad_value"):
        if key not in kwargs:
            continue
        if split == "train" or key not in ds:
            ds[key] = kwargs[key]
        elif ds[key] != kwargs[key]:
            notes.append(f"{path}.kwargs.{key}: {kwargs[key]!r} differs from the training loader's "
                         f"{ds[key]!r}; one value (training's) serves both")


FILE_CACHE_KEYS = ("cache_dir", "cache_name")


def _file_bytes_cache_out_of_kwargs(ds, notes):
    """UP's COCO dataset ``cache: {cache_dir, cache_name}`` pickles the image files' encoded
    bytes once and holds them in every process, to spare file-system reads. It changes no
    pixel, so it leaves with a note; ``dataset.cache: ram | disk`` keeps decoded images here."""
    for split in SPLITS:
        entry = ds.get(split)
        if not (isinstance(entry, dict) and isinstance(entry.get("kwargs"), dict) and "cache" in entry["kwargs"]):
            continue
        path = f"dataset.{split}.kwargs.cache"
        cache = _mapping(entry["kwargs"]["cache"], path)
        for key, value in cache.items():
            if key not in FILE_CACHE_KEYS:
                raise ConfigError(join_path(path, key), "unknown key", did_you_mean(key, FILE_CACHE_KEYS)
                                  or f"UP's cache has {', '.join(FILE_CACHE_KEYS)}")
            if not isinstance(value, str):
                raise ConfigError(join_path(path, key), f"expected a string, got {type(value).__name__}")
        ds[split] = {**entry, "kwargs": {k: v for k, v in entry["kwargs"].items() if k != "cache"}}
        notes.append(f"{path}: UP's pickled copy of the encoded image files is not made (the pixels are the "
                     "same); dataset.cache: ram | disk keeps decoded images across epochs")


def _evaluator_out_of_kwargs(ds, notes):
    """UP keeps the evaluator inside a dataset's kwargs; ours is ``dataset.evaluator``. The
    first one found (training split first) moves there unless one is given already."""
    for split in SPLITS:
        entry = ds.get(split)
        if not (isinstance(entry, dict) and isinstance(entry.get("kwargs"), dict) and "evaluator" in entry["kwargs"]):
            continue
        kwargs = dict(entry["kwargs"])
        evaluator = kwargs.pop("evaluator")
        ds[split] = {**entry, "kwargs": kwargs}
        if ds.get("evaluator") is None:
            ds["evaluator"] = evaluator
            notes.append(f"dataset.{split}.kwargs.evaluator: moved to dataset.evaluator")
        else:
            notes.append(f"dataset.{split}.kwargs.evaluator: not used (dataset.evaluator is given)")


def native_pipeline_key(cfg, notes):
    """UP names a dataset's pipeline ``transformer``; ours is ``transforms``, so whatever
    rebuilds a dataset (yolox_noaug, reload) replaces the pipeline under one name. Both given
    are left for the dataset to refuse."""
    ds = cfg.get("dataset")
    for split in SPLITS if isinstance(ds, dict) else ():
        entry = ds.get(split)
        kwargs = entry.get("kwargs") if isinstance(entry, dict) else None
        if isinstance(kwargs, dict) and "transformer" in kwargs and "transforms" not in kwargs:
            entry["kwargs"] = {("transforms" if k == "transformer" else k): v for k, v in kwargs.items()}
            notes.append(f"dataset.{split}.kwargs.transformer: read as transforms")


def translate_dataset(cfg, notes):
    """Rewrite ``cfg['dataset']`` in place; the UP keys leave, the native ones arrive."""
    given = cfg.get("dataset")
    if not isinstance(given, dict):
        return  # validation reports a missing or malformed section
    ds = dict(given)
    shared = {key: _mapping(ds.pop(key, None), f"dataset.{key}") for key in ("batch_sampler", "dataloader")}
    per_split = {}
    for split in SPLITS:
        entry = ds.get(split)
        own = {}
        if isinstance(entry, dict) and "dataset" in entry and "type" not in entry:
            for key in entry:
                if key not in ("dataset", "batch_sampler", "dataloader"):
                    raise ConfigError(f"dataset.{split}.{key}", "unknown key",
                                      did_you_mean(key, ["dataset", "batch_sampler", "dataloader"])
                                      or "UP form is {dataset: {type, kwargs}, batch_sampler, dataloader}")
            own = {key: _mapping(entry.get(key), f"dataset.{split}.{key}") for key in ("batch_sampler", "dataloader")
                   if key in entry}
            ds[split] = entry["dataset"]
        per_split[split] = own
    # Training first, so its values are the ones a differing evaluation value is compared with.
    for split in SPLITS:
        if ds.get(split) is None:
            continue
        for key, apply in (("batch_sampler", _batch_sampler), ("dataloader", _dataloader)):
            if key in per_split[split]:
                apply(per_split[split][key], f"dataset.{split}.{key}", split, ds, notes)
            elif shared[key]:
                apply(shared[key], f"dataset.{key}", split, ds, notes)
    # A native key given explicitly (e.g. --opts dataset.batch_size=8) wins over UP's spelling.
    for key, value in given.items():
        if key not in SPLITS and key not in shared and ds.get(key) != value:
            notes.append(f"dataset.{key}: {value!r} given explicitly; UP's loader value {ds[key]!r} not used")
            ds[key] = value
    _evaluator_out_of_kwargs(ds, notes)
    _file_bytes_cache_out_of_kwargs(ds, notes)
    given.clear()
    given.update(ds)
