"""``train``, ``evaluate`` and ``build_trainer``: ``up train`` and ``up eval`` called from Python.

Both run the CLI's own code (run.py: the output guard, the run-directory lock, config.yaml,
train.log, checkpoints, metrics files); only the frame differs. Errors are raised, not turned
into exit codes; signal handlers stay the caller's unless ``handle_signals=True``; and every
piece of process state the run changes is put back when the call returns (api/isolation.py).
"""
import dataclasses
import os
from typing import Optional

from ..errors import ConfigError, TrainingInterrupted, join_path, short_repr
from .config import as_config
from .isolation import ONE_CALL, api_call

DEVICES = ("auto", "cpu", "cuda")


@dataclasses.dataclass
class TrainResult:
    """What a training run left: its numbers and where its files are.

    ``metrics``: the last evaluation's metrics ({} when the run evaluated nothing);
    ``best_metric`` / ``best_metric_name`` / ``best_epoch``: auto_save_best's record (None
    without that hook or an evaluation); ``best_checkpoint`` / ``latest_checkpoint``: paths
    (None when not written); ``checkpoints``: every ``ckpt_*.pth`` in save_dir, sorted;
    ``results``: {file name: path} of what the last evaluation wrote to results_dir
    (metrics.json, results.jsonl, ...); ``metrics_csv``: the per-log-line table;
    ``epoch`` / ``iteration``: where training stopped; ``interrupted``: None, or the stop's
    message (a KeyboardInterrupt: the snapshot of the last update was written, resume from
    ``latest_checkpoint``)."""

    run_dir: str
    metrics: dict
    best_metric: Optional[float]
    best_metric_name: Optional[str]
    best_epoch: Optional[int]
    best_checkpoint: Optional[str]
    latest_checkpoint: Optional[str]
    checkpoints: list
    results: dict
    metrics_csv: Optional[str]
    epoch: int
    iteration: int
    interrupted: Optional[str] = None

    @property
    def checkpoint(self):
        """The checkpoint to use next: the best one when kept, else the latest."""
        return self.best_checkpoint or self.latest_checkpoint


def train(config, *, work_dir=None, resume=None, device=None, hooks=(), opts=(), handle_signals=False):
    """Train the model ``config`` describes (a path, a mapping or a :class:`Config`), as
    ``up train --config ... --work-dir ... --resume ... --device ...`` does; returns a
    :class:`TrainResult`.

    ``hooks``: :class:`~up_trainer.Hook` instances joining the config's hooks (by their
    ``priority``); no registry entry needed. ``opts``: overrides as ``--opts`` takes them.
    ``handle_signals``: install auto_checkpoint's SIGINT/SIGTERM/SIGUSR1 handlers as the CLI
    does (off: the caller's handlers stay; a KeyboardInterrupt, e.g. a notebook's interrupt
    button, writes the snapshot of the last update and the call returns with ``interrupted``
    set). Raises the run's errors (:class:`ConfigError`, ``CheckpointError``, ``DataError``,
    ...) as exceptions."""
    from ..run import run_train

    cfg = as_config(config, opts)
    extra = checked_hooks(hooks)
    kept = {}

    def on_built(trainer):
        add_hooks(trainer, extra)
        kept["trainer"] = trainer

    interrupted = None
    with api_call("train"):
        try:
            run_train(cfg.to_dict(), config_path=cfg.source, work_dir=_path_arg(work_dir, "work_dir"),
                      resume=_path_arg(resume, "resume"), device=checked_device(device), config_files=cfg.files,
                      handle_signals=bool(handle_signals), on_built=on_built)
        except TrainingInterrupted as exc:
            if "trainer" not in kept:  # stopped before training began: nothing to report on
                raise
            interrupted = str(exc)
        finally:
            _release(kept.get("trainer"))
        return result_of(kept.pop("trainer"), interrupted)


def evaluate(config, checkpoint, *, work_dir=None, device=None, use_ema=True, opts=()):
    """The metrics of ``checkpoint`` on the config's test set, as ``up eval`` computes and
    writes them (metrics.json and the per-sample results in ``saver.results_dir`` when
    ``saver.save_result``); returns the metrics dict. ``use_ema``: the EMA weights when the
    checkpoint holds them."""
    from ..run import run_eval

    cfg = as_config(config, opts)
    with api_call("evaluate"):
        return run_eval(cfg.to_dict(), _path_arg(checkpoint, "checkpoint", required=True),
                        work_dir=_path_arg(work_dir, "work_dir"), use_ema=bool(use_ema), device=checked_device(device),
                        config_files=cfg.files)


def build_trainer(config, *, work_dir=None, device=None, with_optim=True, hooks=(), opts=()):
    """The :class:`~up_trainer.engine.trainer.Trainer` ``up train`` would run, built and not
    started: its model, optimizer, loaders, evaluator, hooks (``hooks`` objects added) and
    checkpoint store, for those who drive the loop's pieces themselves (``trainer.train()``,
    ``trainer.evaluate()``, ``trainer.train_iter(batch)``). Unlike :func:`train`, the
    runtime settings the config asks for (threads, determinism, seeds) stay applied to the
    process: the trainer runs under them after this call returns."""
    from ..engine.builder import build_trainer as build

    cfg = as_config(config, opts)
    extra = checked_hooks(hooks)
    with ONE_CALL.held("build_trainer"):  # the build seeds and sets up the process's state
        trainer = build(cfg.to_dict(), work_dir=_path_arg(work_dir, "work_dir"), device=checked_device(device),
                        with_optim=bool(with_optim))
    trainer.handle_signals = False
    add_hooks(trainer, extra)
    return trainer


# -- arguments ----------------------------------------------------------------------------------
def checked_hooks(hooks):
    from ..engine.hook_keys import object_keys
    from ..engine.hooks import Hook

    if hooks is None:
        return []
    if isinstance(hooks, Hook):
        hooks = [hooks]
    if not isinstance(hooks, (list, tuple)):
        raise ConfigError("hooks", f"expected a list of Hook instances, got {type(hooks).__name__}")
    seen = set()
    for i, hook in enumerate(hooks):
        if isinstance(hook, type) and issubclass(hook, Hook):
            raise ConfigError(join_path("hooks", i), f"{hook.__name__} is a class: pass an instance, "
                              f"{hook.__name__}()")
        if not isinstance(hook, Hook):
            raise ConfigError(join_path("hooks", i), f"expected a Hook instance (a subclass of up_trainer.Hook), "
                              f"got {type(hook).__name__} {short_repr(hook)}")
        if id(hook) in seen:
            raise ConfigError(join_path("hooks", i), "the same hook object is listed twice")
        seen.add(id(hook))
    object_keys(hooks)  # two unnamed objects of one class with state: refused before anything is built
    return list(hooks)


def add_hooks(trainer, hooks):
    """Add the API's hook objects under stable state keys (their ``name``, else their class),
    never a position suffix: a reordered list hands each its own saved state on resume."""
    from ..engine.hook_keys import object_keys

    keys = object_keys(hooks, {h.name: type(h).keeps_state() for h in trainer.hooks})
    for hook, key in zip(hooks, keys):
        trainer.hooks.add(hook, name=key, type_name=type(hook).__name__)


def checked_device(device):
    if device is None or device in DEVICES:
        return device
    raise ConfigError("device", f"expected one of {', '.join(DEVICES)} or None, got {short_repr(device)}")


def _path_arg(value, name, required=False):
    if value is None and not required:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ConfigError(name, f"expected a file path, got {type(value).__name__} {short_repr(value)}")
    path = os.fspath(value)
    if isinstance(path, bytes) or "\0" in path:
        raise ConfigError(name, f"expected a file path, got {short_repr(value)}")
    return path


# -- after the run ----------------------------------------------------------------------------------
def _release(trainer):
    """End what the trainer holds beyond the call: its checkpoint writer thread."""
    if trainer is None:
        return
    try:
        trainer.store.close()
    except Exception:  # the run itself reports a failed write; this is clean-up only
        pass


def result_of(trainer, interrupted=None):
    from ..engine.checkpoint import BEST, LATEST, parse_name
    from ..hooks.auto_save_best import AutoSaveBest
    from ..writers.table import CSV_NAME

    best = next((h for h in trainer.hooks if isinstance(h, AutoSaveBest)), None)
    save_dir = trainer.store.save_dir
    files = sorted(os.listdir(save_dir)) if os.path.isdir(save_dir) else []
    results_dir = trainer.results_dir
    results = {}
    if results_dir and os.path.isdir(results_dir):
        results = {f: os.path.join(results_dir, f) for f in sorted(os.listdir(results_dir))
                   if not f.startswith(".") and os.path.isfile(os.path.join(results_dir, f))}  # not the lock
    csv = os.path.join(trainer.run_dir, CSV_NAME)

    def existing(path):
        return path if os.path.exists(path) else None

    return TrainResult(
        run_dir=trainer.run_dir, metrics=dict(trainer.state.metrics or {}),
        best_metric=None if best is None else best.best, best_metric_name=None if best is None else best.metric,
        best_epoch=None if best is None else best.best_epoch,
        best_checkpoint=existing(trainer.store.path(BEST)), latest_checkpoint=existing(trainer.store.path(LATEST)),
        checkpoints=[os.path.join(save_dir, f) for f in files if parse_name(f) is not None],
        results=results, metrics_csv=existing(csv), epoch=trainer.state.epoch, iteration=trainer.state.iter,
        interrupted=interrupted)
