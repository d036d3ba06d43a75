"""What ``up config`` checks: everything ``up train`` would build, without reading data.

Every type name is looked up in its registry and every kwargs mapping is compared with the
constructor's signature, in the order ``up train`` builds them: hooks, datasets (their
transforms, image reader and evaluator), the batch mixing function, the net, the optimizer and
the LR schedule. Objects that are cheap and touch no file (hooks, transforms, readers,
evaluators, batch_fn) are constructed, so their value checks run too. The net is built on
PyTorch's meta device (no memory, no init compute), which lets the optimizer and LR schedule be
built on its parameters (for an assumed epoch length). Datasets are only checked
(constructing one reads its files).
"""
import contextlib
import logging

import torch

from ..errors import ConfigError, did_you_mean, join_path
from ..registry import BATCH_FNS, DATASETS, EVALUATORS, IMAGE_READERS, check_kwargs, import_user_modules

TRANSFORM_KWARGS = ("transforms", "transformer")
# The epoch length is unknown without reading data. Schedules are built for a long epoch, so
# errors that only a short one causes (warmup longer than the schedule) show in --dry-run.
ASSUMED_EPOCH_LEN = 10_000


@contextlib.contextmanager
def quiet_log():
    """Builders log what they build (param groups, schedules); ``up config`` prints YAML only."""
    logger = logging.getLogger("up")
    saved = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = saved


def check_dataset(entry, path):
    if entry is None:
        return
    from ..tasks.transforms import build_transforms

    if not isinstance(entry, dict):
        raise ConfigError(path, f"expected a mapping with 'type' and 'kwargs', got {type(entry).__name__}")
    unknown = sorted(set(entry) - {"type", "kwargs"}, key=str)
    if unknown:
        raise ConfigError(join_path(path, unknown[0]), "unknown key", did_you_mean(unknown[0], ["type", "kwargs"]))
    if "type" not in entry:
        raise ConfigError(path, "missing 'type'")
    cls = DATASETS.get(entry["type"], join_path(path, "type"))
    kwpath = join_path(path, "kwargs")
    kwargs = entry.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigError(kwpath, f"expected a mapping, got {type(kwargs).__name__}")
    kwargs = dict(kwargs)
    check_kwargs(cls, kwargs, kwpath)
    for key in TRANSFORM_KWARGS:
        if kwargs.get(key) is not None:
            build_transforms(kwargs[key], join_path(kwpath, key))
    if kwargs.get("image_reader") is not None:
        IMAGE_READERS.build(kwargs["image_reader"], join_path(kwpath, "image_reader"))


def check_net_and_optimization(cfg):
    """Build the net on the meta device, then the optimizer and LR schedule on its parameters."""
    from ..tasks.net import build_model
    from .builder import special_bn_init
    from .optim import Optimization
    from .schedule import Schedule

    with torch.device("meta"), _config_failure("net"):
        model = build_model(cfg["net"])
    if cfg["runtime"].get("special_bn_init"):
        special_bn_init(model)
    if cfg.get("quant") is not None:  # fake quantization inserted on the meta device (quant/)
        from ..quant import apply_quant

        apply_quant(model, cfg)
    if cfg.get("distill") is not None:  # teachers on the meta device, every mimic module path resolved
        from ..distill import check_distill

        check_distill(cfg, model)
    if cfg.get("sparsity") is not None:  # the section read, and some layer of the net masked
        from ..sparsity import check_sparsity

        check_sparsity(cfg, model)
    if cfg["dataset"].get("train") is None:
        return
    from ..protocols import ChecksBatchSize

    if isinstance(model, ChecksBatchSize):  # a pretraining queue tiled by the batch (tasks/ssl)
        model.check_batch_size(cfg["dataset"]["batch_size"], 1)
    with _config_failure("trainer"):
        Optimization(model, cfg["trainer"], cfg["runtime"], torch.device("cpu"), Schedule.of_run(cfg, ASSUMED_EPOCH_LEN),
                     batch_size=cfg["dataset"]["batch_size"], world_size=1)


@contextlib.contextmanager
def _config_failure(section):
    """A builder failing on values its checks let through is still the config's fault here:
    nothing but the config went in."""
    try:
        yield
    except (TypeError, ValueError, RuntimeError, AttributeError, KeyError, IndexError) as exc:
        raise ConfigError(section, f"cannot be built from these values: {type(exc).__name__}: {exc}") from None


def check_buildable(cfg):
    """Raise the ConfigError ``up train`` would raise for a bad type or kwarg; return None."""
    from .builder import build_hooks

    from .speed import check_speed_settings

    with quiet_log():
        import_user_modules(cfg["runtime"]["imports"])
        check_speed_settings(cfg["runtime"])
        build_hooks(cfg["hooks"])
        ds = cfg["dataset"]
        check_dataset(ds["train"], "dataset.train")
        check_dataset(ds["test"], "dataset.test")
        if ds.get("evaluator") is not None:
            EVALUATORS.build(ds["evaluator"], "dataset.evaluator")
        if ds.get("batch_fn") is not None:
            BATCH_FNS.build(ds["batch_fn"], "dataset.batch_fn")
        check_net_and_optimization(cfg)
        if cfg.get("multitask") is not None:  # tasks, their data sections and the net's heads
            from ..multitask import check_multitask

            check_multitask(cfg, check_dataset)
