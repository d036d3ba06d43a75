"""What `up train` and `up eval` do once the config is resolved."""
import contextlib
import json
import logging
import os
import platform
import shlex
import sys
import tempfile
import time

import yaml

from .config.redact import RedactingFilter, redact, redact_argv
from .errors import CheckpointError, ConfigError, TrainingInterrupted, printable
from .paths import check_writable, guard_output_dir  # noqa: F401  (check_writable: imported from here before)
from .run_reuse import is_resume, move_aside, refuse_over_run, resume_command
from .writers.run_files import appending, write_text

log = logging.getLogger("up")


class RunLogFile(logging.FileHandler):
    """train.log. When the disk fills up, the console keeps every line and the run goes on to
    the checkpoint write, which reports the cause in one line; no logging traceback per record."""

    failed = False

    def handleError(self, record):
        if not self.failed:
            self.failed = True
            error = sys.exc_info()[1]
            print(f"up: cannot append to {self.baseFilename} ({getattr(error, 'strerror', None) or error}); "
                  "logging to the console only", flush=True)


def setup_logging(run_dir, is_main=True):
    """Console on stdout (rank 0); a train.log file in the run dir too. Both redact secrets."""
    logger = logging.getLogger("up")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    fmt = logging.Formatter("%(asctime)s %(levelname).1s %(message)s", "%Y-%m-%d %H:%M:%S")
    if is_main:
        console = logging.StreamHandler(sys.stdout)
        console.setFormatter(fmt)
        console.addFilter(RedactingFilter())
        logger.addHandler(console)
        if run_dir:
            os.makedirs(run_dir, exist_ok=True)
            fh = RunLogFile(os.path.join(run_dir, "train.log"))
            fh.setFormatter(fmt)
            fh.addFilter(RedactingFilter())
            logger.addHandler(fh)
    else:
        logger.addHandler(logging.NullHandler())
    return logger


def env_info():
    import torch
    import torchvision

    from . import __version__

    return {
        "up_trainer": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "platform": platform.platform(),
        "argv": shlex.join(redact_argv(sys.argv)),
    }


def write_resolved_config(cfg, run_dir):
    """config.yaml in the run dir: the resolved config, loadable again; env info as comments."""
    os.makedirs(run_dir, exist_ok=True)
    # one comment line each, whatever a value holds (a newline in --work-dir): the file loads back
    header = "".join(f"# {k}: {printable(v)}\n" for k, v in env_info().items())
    path = os.path.join(run_dir, "config.yaml")
    # a run file like any other: written whole or not at all, a full disk is one line (exit 2)
    write_text(path, "# resolved by up train\n" + header + yaml.safe_dump(redact(cfg), sort_keys=False))
    return path


def note_in_resolved_config(run_dir, line):
    """Append a decision taken at build time (e.g. the precision) to config.yaml as a comment:
    the file still loads as the config that was asked for, and says what ran."""
    with appending(os.path.join(run_dir, "config.yaml")) as f:
        f.write(f"# {printable(line)}\n")


# Files a run writes in its run dir (besides metrics.csv / .jsonl) and in results_dir by these
# names: the output guard checks that none is an input and each existing one a regular file.
RUN_DIR_FILES = ("config.yaml", "train.log", "results.png")
RESULTS_FILES = ("metrics.json", "results.jsonl", "results.bbox.json")


def _output_names(what):
    """What :func:`guard_output_dir` is told a run writes in the directory ``what`` names."""
    from .engine.checkpoint import BEST, LATEST, parse_name
    from .writers.table import CSV_NAME, JSONL_NAME

    if what == "run dir":
        return (*RUN_DIR_FILES, CSV_NAME, JSONL_NAME)
    if what == "saver.results_dir":
        return RESULTS_FILES
    if what == "saver.save_dir":
        return lambda name: name in (LATEST, BEST) or parse_name(name) is not None
    return lambda name: name.startswith("events.out.tfevents.")  # a logger's logdir


def guard_run_outputs(paths, inputs, resumed=()):
    """The output guard (paths.py) on every directory the run writes (a RunPaths), before
    anything is created. ``resumed``: checkpoints the run continues from; in save_dir they are
    the run's own state, which it replaces on purpose (auto_resume's ckpt_latest.pth)."""
    for what, path in paths.own_dirs():
        shown = what if what != "run dir" else "--work-dir" if paths.work_dir else "the run directory (the current one)"
        guarded = inputs if what == "saver.save_dir" else [*inputs, *resumed]
        guard_output_dir(path, shown, inputs=guarded, writes=_output_names(what))
    for d in paths.hook_dirs:
        guard_output_dir(d.path, d.key, inputs=[*inputs, *resumed], writes=d.names)


def run_train(cfg, *, config_path, work_dir=None, resume=None, evaluate_only=False, launch="none", ng=1, nm=1,
              port=None, display=None, device=None, dry_run=False, config_files=None, handle_signals=True,
              on_built=None, existing_run=None, run_files=None, command=()):
    """``config_files``: the config and its _base_ files (default: ``config_path``), which no
    output of the run may overwrite. ``handle_signals``: whether auto_checkpoint installs its
    SIGINT/SIGTERM/SIGUSR handlers (the CLI's process is the run's; a Python caller's is not).
    ``on_built(trainer)``: called in this process once the trainer is built, before anything
    is restored or trained (the Python API adds its hook objects there and keeps the trainer).
    ``existing_run``: what to do when save_dir holds another run's checkpoints and this run
    resumes none (run_reuse.py): "refuse" (the CLI), "fresh" (move them aside), None (no check).
    ``run_files``: {name: text} written in the run dir once it is locked (``up train --data``'s
    train.yaml and split.json). ``command``: the `up train` arguments, from which the commands
    that resume the run are written. Returns what the worker returns: the final metrics."""
    from .engine.distributed_launch import launch_workers

    return launch_workers(_train_worker, dict(cfg=cfg, work_dir=work_dir, resume=resume, evaluate_only=evaluate_only,
                                              display=display, device=device, dry_run=dry_run,
                                              config_files=[f for f in (config_files or [config_path]) if f],
                                              handle_signals=handle_signals, on_built=on_built,
                                              existing_run=existing_run, run_files=run_files,
                                              command=list(command)),
                          launch=launch, ng=ng, nm=nm, port=port, runtime_cfg=cfg["runtime"])


def _train_worker(cfg, work_dir, resume, evaluate_only, display, device, dry_run=False, config_files=(),
                  handle_signals=True, on_built=None, existing_run=None, run_files=None, command=()):
    from .engine.checkpoint import LATEST
    from .engine.distributed import DistInfo
    from .run_lock import hold_dirs
    from .run_paths import RunPaths

    paths = RunPaths.of(cfg, work_dir, evaluate_only)  # the guard and the locks see the same folders
    run_dir = paths.run_dir
    is_main = DistInfo().is_main
    if resume and not os.path.exists(resume):  # before anything is locked or written
        raise CheckpointError(f"--resume: checkpoint not found: {resume}")
    if dry_run:  # writes only its log: no run-dir lock, no checkpoint directory
        setup_logging(run_dir, is_main)
        with tempfile.TemporaryDirectory(prefix="up-dry-run-") as elsewhere:  # the run files it reads (split.json)
            return _dry_run(_run_files_moved(cfg, run_dir, run_files, elsewhere), work_dir, device, evaluate_only,
                            resume)
    if is_main:
        saver = cfg["saver"]
        weights = [paths.resolve(saver["pretrain_model"])] if saver["pretrain_model"] else []
        resumed = [paths.resolve(p) for p in (saver["resume_model"],) if p] + ([resume] if resume else [])
        guard_run_outputs(paths, [*config_files, *weights], resumed)
        if existing_run and not evaluate_only:  # never a silent fresh start over a run (run_reuse.py)
            refuse_over_run(cfg, paths.save_dir, resume, existing_run == "fresh", command)
    # Rank 0 holds every directory the run writes for the whole run: a second `up train`
    # writing any of them stops at once (run_lock.py).
    locked = hold_dirs(paths.written()) if is_main else contextlib.nullcontext([])
    with locked as stale_locks:
        moved = None
        if is_main and existing_run == "fresh" and not evaluate_only and not is_resume(cfg, resume):
            moved = move_aside(run_dir, run_outputs(cfg, run_dir, work_dir, extra=tuple(run_files or ())))
        for name, text in (run_files or {}).items() if is_main else ():
            write_text(os.path.join(run_dir, name), text)
        setup_logging(run_dir, is_main)
        if moved:
            log.info("--fresh: the earlier run's files were moved to %s", moved)
        for what, path, holder in stale_locks:
            log.warning("%s lock: taking over from %s, which ended without releasing it (%s)", what, holder, path)
        try:
            return _train_in(cfg, run_dir, is_main, work_dir, resume, evaluate_only, display, device,
                             handle_signals, on_built)
        except TrainingInterrupted as exc:  # the exit line says how to go on
            latest = os.path.join(paths.save_dir, LATEST) if paths.save_dir else ""
            if not is_main or not existing_run or not os.path.exists(latest):
                raise
            raise TrainingInterrupted(exc.exit_code, f"{exc}; resume with: {resume_command(latest, command)}") from None


def _run_files_moved(cfg, run_dir, run_files, folder):
    """``cfg`` with the run files written to ``folder`` instead of the run dir (a dry run writes
    nothing there), every value naming one of them in the run dir pointed at its copy."""
    if not run_files:
        return cfg
    moved = {}
    for name, text in run_files.items():
        write_text(os.path.join(folder, name), text)
        moved[os.path.abspath(os.path.join(run_dir, name))] = os.path.join(folder, name)

    def swap(node):
        if isinstance(node, dict):
            return {k: swap(v) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v) for v in node]
        return moved.get(os.path.abspath(node), node) if isinstance(node, str) and node else node

    return swap(cfg)


def run_outputs(cfg, run_dir, work_dir, extra=()):
    """[(what, folder, names)] of the files a run writes (what --fresh moves aside);
    ``extra``: more names in the run dir."""
    from .run_paths import RunPaths

    paths = RunPaths.of(cfg, work_dir)
    out = []
    for what, path in paths.own_dirs():
        names = _output_names(what)
        if what == "run dir":
            names = (*names, *extra)
        out.append((what, path, names))
    return out + [(d.key, d.path, d.names) for d in paths.hook_dirs]


def _train_in(cfg, run_dir, is_main, work_dir, resume, evaluate_only, display, device, handle_signals=True,
              on_built=None):
    from .engine.builder import build_trainer, restore
    from .paths import resolve_path

    if is_main:
        write_resolved_config(cfg, run_dir)
    started = time.monotonic()
    counted = _class_count(cfg)
    trainer = build_trainer(cfg, work_dir=work_dir, device=device, with_optim=not evaluate_only)
    if is_main and _class_count(cfg) != counted:  # num_classes taken from the data: config.yaml says so
        write_resolved_config(cfg, run_dir)
    if is_main and trainer.optim is not None:
        note_in_resolved_config(run_dir, trainer.optim.precision.describe())
    trainer.display = display
    trainer.handle_signals = handle_signals
    if on_built is not None:
        on_built(trainer)
    loaded = restore(trainer, resume=resolve_path(resume, None) if resume else None, work_dir=work_dir)
    if evaluate_only:
        if loaded is None and not cfg["saver"]["pretrain_model"]:
            log.warning("-e: no checkpoint given (--resume, saver.resume_model or saver.pretrain_model): "
                        "evaluating freshly initialized weights")
        require_evaluator(trainer)
        metrics = evaluate_model(trainer)
        if is_main:
            write_eval_results(trainer, metrics)
        return metrics
    if (cfg.get("quant") or {}).get("mode") == "ptq":  # post-training quantization: no training (quant/ptq_run.py)
        from .quant.ptq_run import run_ptq

        run_ptq(trainer)
    else:
        trainer.train()
    if is_main and trainer.last_results is not None:  # the final evaluation's results, as up eval writes them
        write_eval_results(trainer, trainer.state.metrics, echo=False)
    if is_main:
        from .run_summary import summary_line

        log.info("%s", summary_line(trainer, time.monotonic() - started))
    return trainer.state.metrics


def _class_count(cfg):
    net = cfg.get("net")
    return (net.get("kwargs") or {}).get("num_classes") if isinstance(net, dict) else None


def _dry_run(cfg, work_dir, device, evaluate_only, resume=None):
    """Build as ``up train`` does, 2 iterations and 2 evaluation batches, nothing saved."""
    from .engine.builder import build_trainer
    from .engine.dry_run import dry_run

    log.info("config: %s form%s", (cfg.get("origin") or {}).get("form", "native"),
             "".join(f"\n  {note}" for note in (cfg.get("origin") or {}).get("notes", [])))
    workers = cfg["dataset"]["num_workers"]
    if workers > 1:  # one worker still shows that samples and the collate cross process boundaries
        log.info("dry run: DataLoader workers %d -> 1 for 2 batches", workers)
        cfg = {**cfg, "dataset": {**cfg["dataset"], "num_workers": 1}}
    if cfg["dataset"].get("cache") == "disk":  # the dry run writes nothing but its log
        log.info("dry run: dataset.cache disk -> none (no cache files written)")
        cfg = {**cfg, "dataset": {**cfg["dataset"], "cache": "none"}}
    trainer = build_trainer(cfg, work_dir=work_dir, device=device, with_optim=not evaluate_only)
    if evaluate_only:
        require_evaluator(trainer)
    dry_run(trainer, work_dir, resume)
    return {}


def require_evaluator(trainer):
    if trainer.evaluator is None:
        raise ConfigError("dataset.test", "evaluation needs a test dataset")


def evaluate_model(trainer):
    """``trainer.evaluate()``, or the net's own evaluation: a BigNAS net's sampled subnets or its
    BatchNorm re-estimation first (tasks/up_nets/bignas_accuracy.py)."""
    from .protocols import EvaluatesItself

    module = trainer.module
    return module.evaluate_in(trainer) if isinstance(module, EvaluatesItself) else trainer.evaluate()


def write_eval_results(trainer, metrics, echo=True):
    """metrics.json and the evaluator's per-sample results in results_dir (``saver.save_result``)."""
    if echo:
        log.info("metrics: %s", json.dumps(metrics, sort_keys=True))
    if not trainer.cfg["saver"]["save_result"]:
        return
    from .writers.run_files import replacing, write_text, writing

    with writing(trainer.results_dir):
        os.makedirs(trainer.results_dir, exist_ok=True)
    write_text(os.path.join(trainer.results_dir, "metrics.json"), json.dumps(metrics, indent=2, sort_keys=True))
    with replacing(os.path.join(trainer.results_dir, "results.jsonl")) as tmp:  # no half file on a full disk
        trainer.evaluator.write_results(trainer.last_results, tmp)
    log.info("results written to %s", trainer.results_dir)


def run_eval(cfg, checkpoint, *, work_dir=None, use_ema=True, device=None, config_files=(), tta=None):
    from .engine.builder import build_trainer
    from .paths import resolve_path
    from .engine.checkpoint_fit import load_fitting_weights
    from .data.label_map import adopt_recorded
    from .engine.checkpoint_load import inference_weights
    from .engine.hooks import HookList

    if cfg["saver"]["save_result"] and cfg["saver"]["results_dir"]:  # the only directory eval writes
        guard_output_dir(resolve_path(cfg["saver"]["results_dir"], work_dir), "saver.results_dir",
                         inputs=[*config_files, checkpoint], writes=_output_names("saver.results_dir"))
    setup_logging(None)
    trainer = build_trainer(cfg, work_dir=work_dir, device=device, with_optim=False)
    trainer.hooks = HookList()  # training hooks (EMA swaps, best keeping) must not act on these weights
    weights = inference_weights(checkpoint, use_ema)  # a bare state dict or foreign checkpoint: kind "bare"
    if weights.kind == "ema":
        log.info("evaluating the EMA weights (--no-ema for the raw ones)")
    adopt_recorded(trainer, weights.classes, f"the checkpoint {checkpoint}")  # its label map (None: none recorded)
    load_fitting_weights(trainer.module, weights.state, checkpoint)
    require_evaluator(trainer)
    if tta:  # {"scales": [...], "flip": bool}: the evaluated model sees every view (tta.py)
        from .tta import with_tta

        trainer.model = with_tta(trainer.module, **tta)
        log.info("test-time augmentation: %d views (scales %s, flip %s)", len(trainer.model.views),
                 tta["scales"], tta["flip"])
    metrics = evaluate_model(trainer)
    write_eval_results(trainer, metrics)
    if "eval_insight" in {h.get("type") for h in cfg.get("hooks") or []}:  # the hooks are off here
        from .hooks.eval_insight import write_insight

        insight = write_insight(trainer, trainer.last_results)
        if insight is not None:
            log.info("evaluation insight: %s", ", ".join(os.path.basename(f) for f in insight.files))
    return metrics
