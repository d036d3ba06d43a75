"""UP's BigNAS files (``runtime.runner: bignas``), translated into the supernet or one subnet.

UP trains a weight-sharing supernet (``big_resnet_basic`` + ``big_fpn`` +
``BigRetinaHeadWithBN`` for detection, ``big_regnet`` + ``BigClsHead`` for classification:
:mod:`up_trainer.tasks.up_nets.bignas_regnet`) and then samples, evaluates or fine-tunes subnets of it, the phase
chosen by UP's ``--phase`` flag. Here the phase follows from the file. A file that names its
subnet runs that subnet as a plain detector:

- ``bignas.subnet.subnet_settings`` over a supernet ``net`` (UP's evaluate_subnet /
  finetune_subnet files): the net is rewritten into the static parts UP itself builds from
  those settings (``bignas_resnet_basic`` + ``bignas_fpn`` + ``BignasRetinaHeadWithBN``), each
  value checked against the supernet's search space;
- a ``net`` of those static parts (UP's subnet file) runs as written.

A supernet checkpoint given as ``saver.pretrain_model`` / ``resume_model`` is sliced into the
subnet when it loads (:mod:`up_trainer.tasks.up_nets.bignas_weights`). A supernet file
without a subnet trains the supernet by the sandwich rule (``bignas.train.sample_strategy``
handed to the net, :mod:`up_trainer.tasks.up_nets.bignas_supernet`); its ``flops_range`` /
``subnet_count`` are handed on for ``up flops`` (UP's sample_flops); with ``calib_bn`` (UP's
sample_accuracy) ``up eval`` evaluates each sampled subnet after re-estimating its BatchNorm
statistics. docs/up/nas.rst has the table of UP's files. No torch here.
"""
from ..errors import ConfigError, did_you_mean, join_path
from .bignas_space import choose_part, read_sampling_keys

SUPERNET = {"big_resnet_basic": "bignas_resnet_basic", "big_fpn": "bignas_fpn",
            "BigRetinaHeadWithBN": "BignasRetinaHeadWithBN"}
PART_ELEMENTS = {"big_resnet_basic": ("depth", "out_channel", "kernel_size", "expand_ratio"),
                 "big_fpn": ("depth", "out_channel", "kernel_size"),
                 "BigRetinaHeadWithBN": ("depth", "out_channel", "kernel_size")}
BIGNAS_KEYS = {"train": ("sample_subnet_num", "sample_strategy", "valid_before_train"),
               "data": ("share_interpolation", "share_input", "interpolation_type", "image_size_list",
                        "calib_meta_file", "metric1", "metric2"),
               "subnet": ("calib_bn", "image_size", "flops_range", "baseline_flops", "subnet_count",
                          "subnet_sample_mode", "subnet_settings", "save_subnet_prototxt", "save_subnet_weight",
                          "test_subnet_latency", "sample_with_finetune"),
               "latency": None, "display": None}
SANDWICH = ("max", "min", "random")
SUPERNET_TRUNKS = ("big_resnet_basic", "big_regnet")  # detection (bignas_net.py), classification (bignas_regnet.py)
SAMPLING_KEYS = ("flops_range", "baseline_flops", "subnet_count", "subnet_sample_mode")


def _runner(cfg):
    runtime = cfg.get("runtime")
    runner = runtime.get("runner") if isinstance(runtime, dict) else None
    return runner.get("type") if isinstance(runner, dict) else runner


def _mapping(value, path):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
    return value


def _read_bignas(bignas):
    """The ``bignas`` section, every key known: {group: mapping}."""
    bignas = _mapping(bignas, "bignas")
    for key, value in bignas.items():
        path = join_path("bignas", key)
        if key == "distiller":
            raise ConfigError(path, "UP's in-place distillation during supernet training is not built",
                              "remove it; a fixed subnet trains as a plain detector (docs/up/nas.rst)")
        if key not in BIGNAS_KEYS:
            raise ConfigError(path, "is not read by UP's bignas runner",
                              did_you_mean(key, list(BIGNAS_KEYS)) or f"known: {', '.join(BIGNAS_KEYS)}")
        known = BIGNAS_KEYS[key]
        if known is not None:
            for sub in _mapping(value, path):
                if sub not in known:
                    raise ConfigError(join_path(path, sub), "is not read by UP's bignas runner",
                                      did_you_mean(sub, list(known)) or f"known: {', '.join(known)}")
    return bignas


def _settings_for(settings, name, path):
    """The subnet setting of the net entry ``name``; the head's is {cls_subnet, box_subnet}
    (UP writes them ``roi_head.cls_subnet`` or nested under ``roi_head``)."""
    nested = settings.get(name)
    dotted = {k.split(".", 1)[1]: v for k, v in settings.items() if k.startswith(name + ".")}
    if nested is not None and dotted:
        raise ConfigError(join_path(path, name), "given both nested and as dotted keys", "keep one form")
    return nested, dotted


def _static_part(entry, i, settings, spath):
    """The static entry UP builds from supernet entry ``entry`` (net[i]) and its settings."""
    kind, name = entry["type"], entry["name"]
    kwargs = dict(_mapping(entry.get("kwargs"), join_path(join_path("net", i), "kwargs")))
    kpath = join_path(join_path("net", i), "kwargs")
    for element in PART_ELEMENTS[kind]:
        if element not in kwargs and not (kind == "BigRetinaHeadWithBN" and element == "kernel_size"):
            raise ConfigError(join_path(kpath, element), f"required by UP's {kind}")
    elements = {e: kwargs.pop(e) for e in PART_ELEMENTS[kind] if e in kwargs}
    if kwargs.pop("kernel_transform", False):
        raise ConfigError(join_path(kpath, "kernel_transform"), "a supernet with transformed kernels is not mapped",
                          "a subnet's kernels are the centre of the supernet's; kernel_transform: false")
    kwargs.pop("zero_last_gamma", None)  # the supernet's initialisation; a subnet's weights come from it
    nested, dotted = _settings_for(settings, name, spath)
    if kind != "BigRetinaHeadWithBN":
        if dotted:
            raise ConfigError(join_path(spath, f"{name}.{next(iter(dotted))}"), "not a part of the supernet",
                              f"write {name}: {{{', '.join(elements)}}}")
        chosen = choose_part(elements, nested, join_path(spath, name), kpath)
        kwargs.update(chosen)
    else:
        towers = dict(_mapping(nested, join_path(spath, name))) if nested is not None else dotted
        for key in towers:
            if key not in ("cls_subnet", "box_subnet"):
                raise ConfigError(join_path(spath, f"{name}.{key}"), "not a part of the supernet head",
                                  "its parts: cls_subnet, box_subnet")
        elements.setdefault("kernel_size", [3])
        cls = choose_part(elements, towers.get("cls_subnet"), join_path(spath, f"{name}.cls_subnet"), kpath)
        box = choose_part(elements, towers.get("box_subnet"), join_path(spath, f"{name}.box_subnet"), kpath)
        if box["kernel_size"] != cls["kernel_size"]:
            raise ConfigError(join_path(spath, f"{name}.box_subnet.kernel_size"), f"{box['kernel_size']} differs "
                              f"from cls_subnet's {cls['kernel_size']}", "UP's static head has one kernel size")
        kwargs.pop("feat_planes", None)  # the static head's towers give it: out_channel[-1]
        kwargs.pop("num_conv", None)  # the static head's depth_cls / depth_box
        kwargs.update(kernel_size=cls["kernel_size"], depth_cls=cls["depth"], depth_box=box["depth"],
                      out_channel_cls=cls["out_channel"], out_channel_box=box["out_channel"])
    return {**{k: v for k, v in entry.items() if k not in ("type", "kwargs")}, "type": SUPERNET[kind],
            "kwargs": kwargs}


def subnet_net(net, settings, spath):
    """The static net list of the subnet ``settings`` names in supernet ``net``."""
    settings = _mapping(settings, spath)
    names = [e.get("name") for e in net if isinstance(e, dict)]
    for key in settings:
        if key.split(".", 1)[0] not in names:
            raise ConfigError(join_path(spath, key), "names no net entry", f"entries: {', '.join(map(str, names))}")
    out = []
    for i, entry in enumerate(net):
        if isinstance(entry, dict) and entry.get("type") in SUPERNET:
            out.append(_static_part(entry, i, settings, spath))
        else:
            out.append(entry)
    return out


def _drop(mapping, key, notes, why, where=""):
    if isinstance(mapping, dict) and key in mapping:
        mapping.pop(key)
        notes.append(f"{where}{key}: {why}")


def _calibration_split(dataset, notes):
    """UP's ``train_calib`` split (the images ``calib_bn`` re-estimates BatchNorm statistics on)
    and the ``data_pool`` that names it: not read, calib_bn re-estimates on the train split."""
    if not isinstance(dataset, dict):
        return
    pool = dataset.get("data_pool")
    if pool is not None:
        named = [p.split(":", 1) if isinstance(p, str) and ":" in p else None for p in
                 (pool if isinstance(pool, list) else [None])]
        if any(n is None or n[0] != n[1] for n in named):
            raise ConfigError("dataset.data_pool", f"{pool!r} is not mapped", "only each split under its own "
                              "name ('train:train', 'test:test', 'train_calib:train_calib')")
        dataset.pop("data_pool")
        notes.append("dataset.data_pool: each split under its own name, as without it")
    _drop(dataset, "train_calib", notes, "the calib_bn images; calib_bn re-estimates on the train split instead",
          "dataset.")


def _supernet_training(cfg, bignas, types, notes):
    """The supernet file without a subnet: UP's train_supnet phase, trained with the sandwich
    rule (tasks/up_nets/bignas_supernet.py), its schedule handed to the net."""
    if not types or types[0] not in SUPERNET_TRUNKS:  # the net reader refuses other big_* parts in one line
        notes.append("runtime.runner: bignas: the net has no mapped BigNAS supernet part; it trains as a plain "
                     "net (UP's controller finds nothing to sample)")
        return
    train = _mapping(bignas.get("train"), "bignas.train")
    if train.get("sample_subnet_num", 1) != 1:
        raise ConfigError("bignas.train.sample_subnet_num", f"{train['sample_subnet_num']!r}: several subnets "
                          "per iteration (gradients summed over them) are not built", "1: one subnet per iteration, "
                          "the sample_strategy in turn")
    strategy = train.get("sample_strategy", ["max", "random", "random", "min"])
    if not isinstance(strategy, list) or not strategy or any(m not in SANDWICH for m in strategy):
        raise ConfigError("bignas.train.sample_strategy", f"{strategy!r} is not built",
                          f"a list of {', '.join(SANDWICH)} (UP's subnet-table and middle modes are not built)")
    if train.get("valid_before_train"):
        raise ConfigError("bignas.train.valid_before_train", "evaluating before training is not built",
                          "false; up train -e evaluates the largest subnet")
    data = _mapping(bignas.get("data"), "bignas.data")
    sizes = data.get("image_size_list")
    if isinstance(sizes, list) and len(sizes) > 1:
        raise ConfigError("bignas.data.image_size_list", "several input sizes (each sampled subnet's batch resized) "
                          "are not built", "one size; the pipeline's resize sets it")
    entry = cfg["net"][0]
    entry["kwargs"] = {**(entry.get("kwargs") or {}), "bignas_sample_strategy": list(strategy)}
    notes.append(f"runtime.runner: bignas: the supernet trains one subnet per iteration, {strategy} in turn "
                 "(bignas.train.sample_strategy, moved to net[0].kwargs.bignas_sample_strategy); evaluation "
                 "runs the largest subnet")
    read = ("image_size_list", "metric1", "metric2") if _mapping(bignas.get("subnet"), "bignas.subnet").get(
        "calib_bn") else ("image_size_list",)  # sample_accuracy ranks by the metrics
    for key in [k for k in data if k not in read]:
        notes.append(f"bignas.data.{key}: recorded; not read (one input size, metrics as the evaluator gives them)")


def _sample_accuracy(cfg, bignas, subnet, notes):
    """UP's sample_accuracy phase (calib_bn without a subnet): ``up eval`` draws the subnets
    ``up flops`` lists, re-estimates each one's BatchNorm statistics and evaluates it
    (tasks/up_nets/bignas_accuracy.py); the metrics to rank by and the baseline are handed on."""
    data = _mapping(bignas.get("data"), "bignas.data")
    metrics = [data[k] for k in ("metric1", "metric2") if k in data]
    for i, metric in enumerate(metrics):
        if not isinstance(metric, str) or not metric:
            raise ConfigError(f"bignas.data.metric{i + 1}", f"expected a metric name such as bbox.AP, got {metric!r}")
    accuracy = {"calib_bn": True, "metrics": metrics}
    if subnet.get("baseline_flops") is not None:
        accuracy["baseline_flops"] = subnet["baseline_flops"]
    cfg["net"][0]["kwargs"]["bignas_sample_accuracy"] = accuracy
    notes.append("bignas.subnet.calib_bn: up eval runs UP's sample_accuracy phase: each sampled subnet's "
                 "BatchNorm statistics re-estimated on the train split, then evaluated; the list, the top "
                 "subnets by bignas.data.metric1 and the Pareto front (moved to net[0].kwargs.bignas_sample_accuracy)")


def translate_bignas(cfg, notes):
    """Rewrite a ``runtime.runner: bignas`` file into the fixed subnet it names (in place)."""
    if _runner(cfg) != "bignas":
        _drop(cfg, "bignas", notes, "ignored as in UP (only runtime.runner: bignas reads it)")
        return
    cfg["runtime"].pop("runner")
    bignas = _read_bignas(cfg.pop("bignas", None))
    subnet = _mapping(bignas.get("subnet"), "bignas.subnet")
    saver = cfg.get("saver")
    if isinstance(saver, dict) and saver.get("type") == "nas":
        saver.pop("type")
        notes.append("saver.type: nas: a supernet checkpoint in pretrain_model / resume_model is sliced into the "
                     "subnet as it loads (first channels, first blocks of each stage, centre of each kernel)")
    if isinstance(saver, dict) and saver.get("resume_model") and not saver.get("pretrain_model"):
        saver["pretrain_model"] = saver.pop("resume_model")
        notes.append("saver.resume_model: read as pretrain_model (UP's bignas phases take the supernet's weights "
                     "and count iterations from 0)")
    for key in ("supernet", "subnet", "subnet_settings"):
        _drop(saver, key, notes, "UP's NasSaver slicing plan; the slice follows the net's own shapes",
              "saver.")
    for key in ("supernet", "subnet_settings"):
        if isinstance(cfg.get(key), (list, dict)) and "type" not in cfg[key]:
            _drop(cfg, key, notes, "a YAML anchor holder nothing reads; ignored as in UP")
    _calibration_split(cfg.get("dataset"), notes)
    net = cfg.get("net")
    types = [e.get("type") for e in net if isinstance(e, dict)] if isinstance(net, list) else []
    if any(t in SUPERNET.values() for t in types):
        notes.append("runtime.runner: bignas: the net is a fixed subnet (UP's bignas_* parts); bignas."
                     f"{', bignas.'.join(bignas) or ''} not read for it")
        return
    settings = subnet.get("subnet_settings")
    if settings is None:
        if subnet.get("sample_with_finetune"):
            raise ConfigError("bignas.subnet.sample_with_finetune", "fine-tuning each sampled subnet before "
                              "evaluating it is not built", "false: up eval evaluates each sampled subnet after "
                              "BatchNorm re-estimation (calib_bn); fine-tune a chosen one with subnet_settings")
        _supernet_training(cfg, bignas, types, notes)
        if (any(k in subnet for k in SAMPLING_KEYS) or subnet.get("calib_bn")) and types and \
                types[0] in SUPERNET_TRUNKS:
            read_sampling_keys(subnet, "bignas.subnet")  # checked here, under UP's key
            entry = cfg["net"][0]
            entry["kwargs"]["bignas_subnet_sampling"] = {k: subnet[k] for k in ("subnet_count", "flops_range")
                                                         if k in subnet}
            notes.append("bignas.subnet.flops_range / subnet_count: up flops lists the FLOPs of sampled subnets "
                         "(UP's sample_flops phase; moved to net[0].kwargs.bignas_subnet_sampling); up train "
                         "trains the supernet")
            if subnet.get("calib_bn"):
                if types[0] != "big_resnet_basic":
                    raise ConfigError("bignas.subnet.calib_bn", "UP's sample_accuracy phase is built for the "
                                      "detection supernet (big_resnet_basic) only", "leave calib_bn out: up flops "
                                      "lists the sampled subnets")
                _sample_accuracy(cfg, bignas, subnet, notes)
            for key in [k for k in subnet if k not in ("subnet_count", "flops_range", "calib_bn", "baseline_flops")]:
                notes.append(f"bignas.subnet.{key}: recorded; not read (up flops counts at its --input-size)")
        return
    if types and types[0] == "big_regnet":
        raise ConfigError("bignas.subnet.subnet_settings", "a fixed subnet of UP's RegNet supernet (static "
                          "bignas_regnet) is not built", "write the subnet's values as fixed lists in net[0].kwargs "
                          "(the supernet at one point; a supernet checkpoint slices into it), docs/up/nas.rst")
    if not types or types[0] not in SUPERNET:
        raise ConfigError("net[0].type", f"{types[0] if types else None!r} is not a mapped BigNAS supernet part",
                          f"mapped: {', '.join(SUPERNET)}; UP's subnet files use {', '.join(SUPERNET.values())}")
    cfg["net"] = subnet_net(net, settings, "bignas.subnet.subnet_settings")
    notes.append("runtime.runner: bignas: the subnet of bignas.subnet.subnet_settings runs as a fixed net "
                 f"({' + '.join(e['type'] for e in cfg['net'])}); it trains with up train and evaluates with "
                 "up eval (UP's --phase finetune_subnet / evaluate_subnet)")
    if subnet.get("calib_bn"):
        cfg["net"][0]["kwargs"]["bignas_calib_bn"] = True
        notes.append("bignas.subnet.calib_bn: up eval re-estimates the subnet's BatchNorm statistics on the train "
                     "split before evaluating it (UP's evaluate_subnet; moved to net[0].kwargs.bignas_calib_bn)")
    for key in [k for k in subnet if k not in ("subnet_settings", "calib_bn")]:
        notes.append(f"bignas.subnet.{key}: recorded; not read for one fixed subnet")
    for key in [k for k in bignas if k != "subnet"]:
        notes.append(f"bignas.{key}: not read for one fixed subnet (UP's controller skips it when the subnet "
                     "is set)")
