"""``up train --dry-run``: check a config end to end before queueing it (Lightning's fast_dev_run).

Everything is built as for a real run (datasets, loaders, net, optimizer, LR schedule, hooks,
evaluator), then 2 training iterations and 2 evaluation batches run. Nothing is written but the
log: the hooks are built (so their kwargs are checked) but not called, no checkpoint is loaded
or saved, and the evaluator's metrics are printed, not stored.
"""
import logging
import os
import time

import torch

from ..data.model_input import batch_to_model
from ..paths import resolve_path
from ..protocols import EvaluatesTasks
from .hooks import HookList

log = logging.getLogger("up")

TRAIN_ITERS = 2
EVAL_BATCHES = 2


def precision_line(optim):
    """The run's precision decision as the optimizer holds it (float32 without autocast)."""
    precision = getattr(optim, "precision", None)
    if precision is not None and hasattr(precision, "describe"):
        return precision.describe()
    dtype = getattr(optim, "amp_dtype", None)
    if dtype is None:
        return "precision: float32 (no autocast)"
    scaler = getattr(optim, "scaler", None)
    return f"precision: {str(dtype).replace('torch.', '')} autocast" + (" + GradScaler" if scaler else "")


def report_weights(cfg, work_dir, resume=None):
    """Say which weights a real run would load; a dry run loads none."""
    if resume:
        log.info("dry run: --resume %s is not loaded", resume)
    saver = cfg["saver"]
    for key in ("resume_model", "pretrain_model"):
        path = saver.get(key)
        if path:
            full = resolve_path(path, work_dir)  # as a real run reads it
            if os.path.isfile(full):
                log.info("dry run: saver.%s %s (found) is not loaded", key, path)
            else:  # a warning, not an error: a file copied from a cluster names its weights there
                log.warning("dry run: saver.%s %s (NOT FOUND) is not loaded; a real run stops here", key, path)
    if saver.get("auto_resume"):
        log.info("dry run: saver.auto_resume is not applied")


def dry_run(trainer, work_dir=None, resume=None, train_iters=TRAIN_ITERS, eval_batches=EVAL_BATCHES):
    """Run ``train_iters`` training iterations and ``eval_batches`` evaluation batches."""
    log.info("dry run: %d training iterations, %d evaluation batches; nothing is written but the log",
             train_iters if trainer.optim is not None else 0, eval_batches if trainer.evaluator is not None else 0)
    if trainer.optim is not None:
        log.info(precision_line(trainer.optim))
        log.info("a real run: %s", trainer.schedule.describe())  # how max_iter / iter_base map onto epochs
    report_weights(trainer.cfg, work_dir, resume)
    log.info("hook order per event (built, not run in a dry run):\n%s", trainer.hooks.order_table())
    trainer.hooks = HookList()
    if trainer.optim is not None and (trainer.cfg.get("quant") or {}).get("mode") == "ptq":
        from ..quant.ptq_run import run_ptq  # post-training quantization: calibration and reconstruction, shortened

        run_ptq(trainer, iterations=train_iters, batch_count=train_iters, evaluate=False, save=False,
                max_units=train_iters)
        log.info("dry run: ptq calibrated on %d batch(es), %d reconstruction iteration(s) on each of the first %d "
                 "units", train_iters, train_iters, train_iters)
    elif trainer.optim is not None:
        _train(trainer, train_iters)
    if trainer.evaluator is not None:
        _evaluate(trainer, eval_batches)
    log.info("dry run: ok")


def _train(trainer, iters):
    st = trainer.state
    st.epoch = 1
    trainer.model.train()
    batches = iter(trainer.loaders.train_loader(1))
    for i in range(min(iters, st.epoch_len)):
        start = time.perf_counter()
        trainer.train_iter(next(batches))
        losses = {k: round(float(v.detach()), 4) for k, v in trainer.outputs.items()
                  if "loss" in k and isinstance(v, torch.Tensor) and v.numel() == 1}
        log.info("dry run: train iteration %d/%d  %s  lr %s  %.2fs", i + 1, iters, losses,
                 _fmt_lr(trainer.optim), time.perf_counter() - start)
    del batches


def _fmt_lr(optim):
    lrs = sorted({g["lr"] for g in optim.optimizer.param_groups})
    return ", ".join(f"{lr:.4g}" for lr in lrs)


@torch.no_grad()
def _evaluate(trainer, n_batches):
    trainer.model.eval()
    if isinstance(trainer.evaluator, EvaluatesTasks):  # a multitask run: n_batches of each task
        metrics, _ = trainer.evaluator.evaluate_tasks(trainer, trainer.loaders, n_batches)
        log.info("dry run: evaluated up to %d batch(es) per task, metrics on them: %s", n_batches,
                 {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()
                  if not str(k).startswith("all.")})
        return
    trainer.evaluator.reset()
    seen = 0
    for i, batch in enumerate(trainer.loaders.test_loader()):
        if i == n_batches:
            break
        batch = batch_to_model(batch, trainer.device, non_blocking=False)
        with trainer.optim.autocast() if trainer.optim else torch.autocast("cpu", enabled=False):
            outputs = trainer.module(batch)
        trainer.evaluator.process(batch, outputs)
        seen += 1
    metrics = trainer.evaluator.evaluate(trainer.evaluator.results())
    shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}
    log.info("dry run: evaluated %d batch(es), metrics on them: %s", seen, shown)
