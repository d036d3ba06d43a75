"""UP's dialect, translated once at config time into the native structures.

A file is read as UP form when it carries UP's marks: a ``net`` list of ``{name, type, kwargs}``,
a split written ``{dataset: {type, kwargs}, ...}``, or ``runtime.task_names``. Then UP's
defaults apply where they differ from ours, and every default applied or UP key recorded lands
in the ``origin`` section as one note, so ``up config`` shows it and ``config.yaml`` in the run
dir keeps it. The trainer, hooks and checkpoints never learn which dialect a run came from.

Translation steps are plain functions ``step(cfg, notes)`` in ``UP_STEPS``; a step that knows
one area (runtime, dataset, trainer, net) rewrites only that area. No torch import here.
"""
import hashlib

from ..errors import ConfigError, did_you_mean
from .up_cutmix import cutmix_mixup_to_batch_fn
from .up_bignas import translate_bignas
from .up_dataset import native_pipeline_key, translate_dataset
from .up_distill import translate_distill
from .up_hooks import refuse_unmapped_hooks, up_yolox_noaug_counts
from .up_multitask import translate_multitask
from .up_quant import translate_quant
from .up_ssl import translate_ssl
from .up_trainer_defaults import apply_up_trainer_defaults

UP_DEFAULT_SEED = 131  # UP's runner: runtime.random_seed defaults to 131


def is_up_form(cfg):
    net = cfg.get("net")
    if isinstance(net, list) and net and all(isinstance(e, dict) and "name" in e for e in net):
        return True
    runtime = cfg.get("runtime")
    # a value, not the key: a resolved native config (a run's config.yaml, a Config handed back
    # to load_config) holds the schema's default, task_names: null, and must resolve as native
    if isinstance(runtime, dict) and runtime.get("task_names") is not None:
        return True
    ds = cfg.get("dataset")
    return isinstance(ds, dict) and any(isinstance(ds.get(s), dict) and "dataset" in ds[s] and "type" not in ds[s]
                                        for s in ("train", "test"))


def runtime_defaults(cfg, notes):
    """UP's seeding: random_seed 131 unless set; one seed for every rank unless rank_init."""
    rt = cfg.get("runtime")
    if rt is None:
        rt = cfg["runtime"] = {}
    if not isinstance(rt, dict):
        return  # validation reports it with its path
    if rt.get("seed") is None and rt.get("random_seed") is None:
        rt["random_seed"] = UP_DEFAULT_SEED
        notes.append(f"runtime.random_seed: {UP_DEFAULT_SEED} (UP's default)")
    if "rank_init" not in rt:
        rt["rank_init"] = False
        notes.append("runtime.rank_init: false (UP's default: every rank seeds its random streams alike)")
    if "task_names" in rt:
        notes.append(f"runtime.task_names: {rt['task_names']!r} recorded (the task follows from the net and "
                     "dataset types)")
    if rt.get("aligned"):
        notes.append("runtime.aligned: true: UP's +1 pixel box width is not applied; boxes are continuous "
                     "coordinates as in torchvision (docs/up/config.rst)")


# Top-level keys UP's runner never reads although UP files carry them (UP reads runtime.fp16
# and runtime.iter_base). Kept out of the run as UP keeps them out, and said so.
UP_UNREAD_TOP_LEVEL = {
    "fp16": "UP reads runtime.fp16, not a top-level fp16; ignored as in UP (move it under runtime to use it)",
    "iter_base": "UP reads runtime.iter_base, not a top-level iter_base; ignored as in UP "
                 "(move it under runtime to use it)",
}


def top_level_keys(cfg, notes):
    from .schema import SCHEMAS, SECTIONS

    for key, why in UP_UNREAD_TOP_LEVEL.items():
        if key in cfg:
            cfg.pop(key)
            notes.append(f"{key}: {why}")
    # UP files keep component definitions at the top level for aliasing; some are never aliased
    # (UP reads only its sections, so they do nothing there). A {type, ...} mapping under a name
    # that resembles no section is such a definition; a misspelt section still fails validation.
    # Only a section that itself holds a ``type`` (net, ema, ...; not runtime, dataset, trainer,
    # saver) can be misspelt into one: ``train_resize: {type: keep_ar_resize}`` is a definition.
    typed_sections = [s for s in SECTIONS if s not in SCHEMAS]
    for key in [k for k in cfg if k not in SECTIONS and k != "lr_scheduler"]:
        value = cfg[key]
        if isinstance(value, dict) and isinstance(value.get("type"), str) and not did_you_mean(key, typed_sections):
            cfg.pop(key)
            notes.append(f"{key}: a {value['type']} definition nothing refers to; ignored as in UP")
    # A scheduler written one level too high (UP's swin_transformer_small.yaml): UP would stop
    # on the missing trainer.lr_scheduler; the file's intent is unambiguous when trainer has none.
    if "lr_scheduler" in cfg:
        trainer = cfg.get("trainer")
        if isinstance(trainer, dict) and trainer.get("lr_scheduler") is None:
            trainer["lr_scheduler"] = cfg.pop("lr_scheduler")
            notes.append("lr_scheduler: a top-level lr_scheduler was moved under trainer (trainer had none)")
        else:
            raise ConfigError("lr_scheduler", "a top-level lr_scheduler is not read", "it belongs under trainer")


def trainer_defaults(cfg, notes):
    """UP's warmup and lr-scaling defaults, written into trainer.lr_scheduler (up_trainer_defaults.py)."""
    notes.extend(apply_up_trainer_defaults(cfg))


UP_STEPS = [runtime_defaults, translate_multitask, translate_bignas, translate_quant, translate_distill, translate_ssl,
            top_level_keys, trainer_defaults]
UP_STEPS.append(up_yolox_noaug_counts)  # hook kwargs UP reads more loosely than the native hook


def file_digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def translate(cfg, source_path=None):
    """Rewrite ``cfg`` in place into the native form; returns it. UP's dataset forms (a split's
    ``{dataset, batch_sampler, dataloader}``, shared loader keys) are translated in either form."""
    notes = []
    up = is_up_form(cfg)
    if up:
        for step in UP_STEPS:
            step(cfg, notes)
    translate_dataset(cfg, notes)
    cutmix_mixup_to_batch_fn(cfg, notes)
    native_pipeline_key(cfg, notes)
    refuse_unmapped_hooks(cfg)
    previous = cfg.get("origin")
    if isinstance(previous, dict) and previous.get("form"):
        return cfg  # an already translated config (a run dir's config.yaml) keeps its record
    if up or notes:
        origin = {"form": "UP" if up else "native"}
        if source_path:
            origin["file"] = str(source_path)
            origin["sha256"] = file_digest(source_path)
        origin["notes"] = notes
        cfg["origin"] = origin
    return cfg
