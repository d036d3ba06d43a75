"""The line that ends a run: what it reached, the checkpoint to use, the time, the plots."""
import os


def _duration(seconds):
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def summary_line(trainer, seconds):
    """The run in one line: best metric and its epoch (else the last metrics), the checkpoint
    to use (best, else latest), the time this command took, and where the plots are."""
    from .engine.checkpoint import BEST, LATEST
    from .hooks.auto_save_best import AutoSaveBest
    from .hooks.eval_insight import EvalInsight
    from .hooks.train_val_logger import TrainValLogger

    best = next((h for h in trainer.hooks if isinstance(h, AutoSaveBest)), None)
    parts = []
    if best is not None and best.best is not None:
        parts.append(f"best {best.monitored} {best.best:.4f} at epoch {best.best_epoch}")
    else:
        last = [(k, v) for k, v in (trainer.state.metrics or {}).items() if isinstance(v, (int, float))][:2]
        if last:
            parts.append("last " + ", ".join(f"{k} {v:.4f}" for k, v in last))
    ckpt = next((trainer.store.path(n) for n in (BEST, LATEST) if os.path.exists(trainer.store.path(n))), None)
    parts.append(f"checkpoint {ckpt}" if ckpt else "no checkpoint")
    parts.append(f"time {_duration(seconds)}")
    # the plots this run drew (not ones an earlier run left): the logger's curves, the insight's figures
    plots = []
    logger = next((h for h in trainer.hooks if isinstance(h, TrainValLogger)), None)
    curves = os.path.join(trainer.run_dir, "results.png")
    if logger is not None and logger.plot and os.path.exists(curves):
        plots.append(curves)
    results = trainer.results_dir
    if any(isinstance(h, EvalInsight) for h in trainer.hooks) and results and os.path.isdir(results) and any(
            f.endswith(".png") for f in os.listdir(results)):
        plots.append(os.path.join(results, "*.png"))
    parts.append(f"plots {', '.join(plots)}" if plots else "no plots")
    return "run finished: " + "; ".join(parts)
