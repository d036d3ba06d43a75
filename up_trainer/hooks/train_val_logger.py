"""train_val_logger: log lines, a TTY progress bar, summary writers, metrics.csv / .jsonl, plots.

Per-iteration cost is a few perf_counter() calls and float additions: losses, LR and
grad norm are read (``.item()``) only on log lines, and CUDA is synchronised only there, so
window timings include the GPU work queued since the previous line.
"""
import atexit
import logging
import os
import sys
import time
from typing import Optional, Union

from ..errors import ConfigError
from ..protocols import TakesArtifacts, TakesConfig, TakesImages
from ..registry import HOOKS
from ..writers.fanout import FanOutWriter, writer_specs
from ..writers.guarded import KeptWriter
from ..writers.run_files import RunFileError
from .base import Hook
from .log_measures import PHASES, PhaseTimer, as_number, fmt_seconds, hms, is_number, loss_values, max_memory_mb
from .progress_bars import make_bar

log = logging.getLogger("up")

BAR_EVERY_S = 0.2  # progress bar redraw interval


def send_images(trainer, images, step):
    """Pictures for the run's summary writers that show hooks' pictures (W&B), through the
    logger that holds them (train_val_logger.add_image); TensorBoard has its own files."""
    logger = trainer.hooks.get("train_val_logger")
    if not isinstance(logger, TakesImages):
        return
    for tag, image in images.items():
        logger.add_image(tag, image.numpy() if hasattr(image, "numpy") else image, step)


@HOOKS.register("train_val_logger")
class TrainValLogger(Hook):
    """Log progress, LR, memory, ETA, timings and losses; TensorBoard/pavi; metrics.csv/.jsonl.

    Every ``freq`` iterations (``--display N`` overrides it when given) one line: progress,
    epoch [i/len], LR, max memory (CUDA, else process RSS), ETA, data/forward/backward/batch
    time as window (global) averages without the first ``skip_first_k`` iterations, losses
    and the gradient norm (``grad_norm``: measured at every optimizer step, one fused
    reduction; grad_clipper's pre-clip norm when one runs). A live progress bar when stdout
    is a TTY (in a Jupyter kernel: a notebook progress bar). ``summary_writer``:
    tensorboard | pavi | mlflow | wandb | none, or a list of writers that all run (``[tensorboard,
    mlflow, wandb]``), built with ``writer_kwargs`` (for a list: each writer's kwargs under its
    name); event files go to ``logdir`` (relative to the run dir). metrics.csv / metrics.jsonl
    always; results.png at the end.
    """

    priority = "BELOW_NORMAL"
    lock_outputs = True  # two runs' event files in one logdir would read as one run

    @classmethod
    def output_dirs(cls, kwargs):
        if cls.configured(kwargs, "summary_writer") == "none":
            return []
        return [("logdir", cls.configured(kwargs, "logdir"), lambda name: name.startswith("events.out.tfevents."))]

    def __init__(self, freq: int = 20, skip_first_k: int = 5, logdir: str = "log",
                 summary_writer: Union[str, list] = "tensorboard", writer_kwargs: Optional[dict] = None,
                 progress_bar: bool = True, plot: bool = True, grad_norm: bool = True):
        super().__init__()
        if freq < 1:
            raise ConfigError("freq", f"must be >= 1, got {freq}")
        if skip_first_k < 0:
            raise ConfigError("skip_first_k", f"must be >= 0, got {skip_first_k}")
        self.freq, self.skip_first_k, self.logdir = freq, skip_first_k, logdir
        self.summary_writer = summary_writer
        self.writer_kwargs = dict(writer_kwargs or {})
        self.progress_bar, self.plot, self.grad_norm = progress_bar, plot, grad_norm
        self._writer_specs = writer_specs(summary_writer, self.writer_kwargs)  # checked before any run starts
        self.writer = self.table = None
        self._started = False

    # -- setup / teardown -----------------------------------------------------------------------
    def before_train(self, trainer):
        st = trainer.state
        self._started = True
        self._main = trainer.dist.is_main
        self._freq = trainer.display or self.freq
        self._total = trainer.total_iters
        self._cuda = getattr(trainer.device, "type", "cpu") == "cuda"
        self._timer, self._seen = PhaseTimer(), 0
        self._advised = False  # the worker-count advice: at most once per run
        self._losses = {}  # under DDP: the loss terms averaged over ranks at the last log line
        self._t_prev = self._t_data = self._t_fwd = self._t_fwd_end = self._t_bwd_end = None
        self._stream = sys.stdout
        self._bar = make_bar(self._stream) if self._main and self.progress_bar else None
        self._tty = self._bar is not None  # a bar is drawn (a terminal's or a notebook's)
        self._bar_t = 0.0
        if self._tty and self._bar.needs_clearing:
            self._attach_bar_clearing()
        if not self._main:
            return
        from ..writers.table import MetricsTable

        self.table = MetricsTable(trainer.run_dir, keep_upto_iter=st.iter)
        where = "metrics.csv/.jsonl"
        if self._writer_specs:
            logdir = self.logdir if os.path.isabs(self.logdir) else os.path.join(trainer.run_dir, self.logdir)
            self.writer = self._open_writers(logdir, st)
            where += f" and {self.writer!r}" if self.summary_writer == "pavi" else f" and {logdir}"
            if isinstance(self.writer, FanOutWriter):
                where += f" ({self.writer!r})"
            if isinstance(self.writer, TakesConfig):
                from ..config.redact import redact

                self.writer.add_config(redact(trainer.cfg))
            atexit.register(self._close_writer, True)  # interrupted runs skip after_train
        log.info("logging every %d iterations to %s", self._freq, where)

    def _open_writers(self, logdir, st):
        """Every writer asked for; one that cannot start closes those already open."""
        # Where a resumed run starts on both step axes: writers drop what lies beyond.
        evaluated = st.epoch if st.epoch_done else st.epoch - 1
        opened = []
        try:
            for name, cls, kwargs in self._writer_specs:
                try:
                    opened.append((name, cls(logdir=logdir, start_iter=st.iter, start_epoch=max(evaluated, 0),
                                             **kwargs)))
                except ImportError as exc:
                    extra = f" (pip install up-trainer[{name}])" if name in ("mlflow", "wandb") else ""
                    raise ConfigError("train_val_logger.summary_writer", f"{name} writer unavailable: {exc}{extra}",
                                      "install it, or set summary_writer: none") from None
        except BaseException:
            try:
                FanOutWriter(opened).close()
            except Exception as exc:  # the writer that could not start is the error to report
                log.warning("closing the writers already open failed as well: %s", exc)
            raise
        kept = [(name, KeptWriter(name, writer)) for name, writer in opened]  # a failure later is a warning
        return kept[0][1] if len(kept) == 1 else FanOutWriter(kept)

    def add_image(self, tag, image, step):
        """A picture a hook drew (eval_insight, visualize) for the writers that show hooks'
        pictures (W&B); TensorBoard gets them from the hooks' own event files."""
        if self.writer is not None and getattr(self.writer, "images_from_hooks", False):
            self.writer.add_image(tag, image, step)

    def after_train(self, trainer):
        self._detach_bar_clearing()
        self._clear_bar()
        if getattr(self, "_bar", None) is not None and not self._bar.needs_clearing:
            self._close_bar(trainer)  # a notebook's bar shows where training ended
        if self._main and self.plot and self.table is not None:
            try:
                from ..plot import plot_run

                log.info("training curves: %s", plot_run(trainer.run_dir))
            except RunFileError:  # a full disk is not a plotting problem: one line, exit 2 (writers/run_files.py)
                raise
            except Exception as exc:  # a plotting problem must not fail a finished run
                log.warning("could not draw results.png: %s", exc)
        if isinstance(self.writer, TakesArtifacts):
            self._send_artifacts(trainer)
        self._close_writer()

    def _send_artifacts(self, trainer):
        """The best checkpoint and the plots (results.png, results_dir's evaluation plots)."""
        from ..engine.checkpoint import BEST

        trainer.store.flush()  # an asynchronous write of ckpt_best.pth may still be in flight
        found = [(trainer.store.path(BEST), "checkpoints"), (os.path.join(trainer.run_dir, "results.png"), None)]
        results_dir = trainer.results_dir
        if results_dir and os.path.isdir(results_dir):
            found += [(os.path.join(results_dir, f), "results_dir") for f in sorted(os.listdir(results_dir))
                      if f.endswith((".png", ".csv"))]
        for path, where in found:
            if os.path.exists(path):
                self.writer.add_artifact(path, where)

    def on_exception(self, trainer, exc):
        self._detach_bar_clearing()
        self._clear_bar()
        self._close_writer(quiet=True)

    def _close_writer(self, quiet=False):
        """Close the summary writer; ``quiet`` (a run already failing, or exiting): a file it
        cannot write out any more is one warning, not a second error."""
        writer, self.writer = self.writer, None
        if writer is not None:
            atexit.unregister(self._close_writer)
            try:
                writer.close()
            except RunFileError as exc:
                if not quiet:
                    raise
                log.warning("%s", exc)

    # -- timing: one perf_counter() per event ----------------------------------------------------
    def before_epoch(self, trainer, epoch):
        self._t_prev = None  # evaluation and checkpointing between epochs are not batch time

    def before_data(self, trainer, iteration):
        self._t_data = time.perf_counter()
        if self._t_prev is None:
            self._t_prev = self._t_data

    def before_forward(self, trainer, iteration, batch):
        self._t_fwd = time.perf_counter()

    def after_forward(self, trainer, iteration, outputs):
        self._t_fwd_end = time.perf_counter()

    def after_backward(self, trainer, iteration, loss):
        self._t_bwd_end = time.perf_counter()

    def before_step(self, trainer, iteration):
        # The norm of every step, unless a grad_clipper (which runs first) already measured it.
        if self.grad_norm and self._main and "grad_norm" not in trainer.scalars:
            norm = trainer.optim.grad_norm()
            if norm is not None:
                trainer.scalars.put("grad_norm", norm)

    def after_update(self, trainer, iteration):
        log_now = iteration % self._freq == 0
        is_line = self._main and log_now  # other ranks only time themselves ...
        if log_now and trainer.dist.enabled:  # ... and join the loss average (a collective: all ranks)
            self._losses = trainer.dist.all_reduce_mean_dict(loss_values(trainer.outputs))
        if is_line and self._cuda:
            import torch

            torch.cuda.synchronize()
        now = time.perf_counter()
        if self._t_prev is not None and self._t_bwd_end is not None:
            batch = now - self._t_prev
            self._timer.raw_batch += batch
            self._timer.raw_n += 1
            self._seen += 1
            if self._seen > self.skip_first_k:
                self._timer.add((self._t_fwd - self._t_data, self._t_fwd_end - self._t_fwd,
                                 self._t_bwd_end - self._t_fwd_end, batch))
        self._t_prev = now
        if is_line:
            self._log_line(trainer, iteration)
            self._timer.reset_window()
        elif self._tty and now - self._bar_t >= BAR_EVERY_S:
            self._draw_bar(trainer, now)

    # -- output ------------------------------------------------------------------------------------
    def _log_line(self, trainer, iteration):
        st = trainer.state
        losses = self._losses if trainer.dist.enabled else loss_values(trainer.outputs)
        lr = trainer.optim.lr() if trainer.optim is not None else None
        grad_norm = as_number(trainer.scalars.get("grad_norm"))
        mem = max_memory_mb(trainer.device)
        win, tot = self._timer.averages()
        eta = self._eta(iteration)
        pct = 100.0 * iteration / max(self._total, 1)
        parts = [f"[{pct:5.1f}%] epoch {st.epoch} [{st.epoch_iter}/{st.epoch_len}]"]
        if lr is not None:
            parts.append(f"lr {lr:.4g}")
        if mem is not None:
            parts.append(f"mem {mem:.0f}MB")
        parts.append(f"eta {hms(eta)}")
        times = " ".join(f"{name} {fmt_seconds(w)} ({fmt_seconds(t)})" for name, w, t in zip(PHASES, win, tot))
        line = " ".join(parts) + " | time " + times
        if losses:
            line += " | " + " ".join(f"{k} {v:.4f}" for k, v in losses.items())
        if grad_norm is not None:
            line += f" | grad_norm {grad_norm:.4f}"
        self._clear_bar()
        log.info(line)
        self._advise_workers(trainer, win)
        row = {"phase": "train", "epoch": st.epoch, "iter": iteration, "lr": lr, **losses, "grad_norm": grad_norm,
               "memory_mb": mem, "time": round(time.time(), 3)}
        row.update({f"{name}_time": w for name, w in zip(PHASES, win)})
        self.table.write(row)
        if self.writer is not None:
            for k, v in losses.items():
                self.writer.add_scalar(f"train/{k}", v, iteration)
            if lr is not None:
                self.writer.add_scalar("train/lr", lr, iteration)
            if grad_norm is not None:
                self.writer.add_scalar("train/grad_norm", grad_norm, iteration)
        if self._tty:
            self._draw_bar(trainer, time.perf_counter())

    def _advise_workers(self, trainer, win):
        """Once per run: when a step waits longer for data than it computes, how many
        DataLoader workers would hide the loading."""
        if self._advised or win[0] is None:
            return
        from ..data.worker_advice import worker_advice

        ds = trainer.cfg["dataset"]
        advice = worker_advice(win[0], win[-1], ds["num_workers"], ds.get("cache", "none"))
        if advice is not None:
            self._advised = True
            log.info(advice)

    def after_epoch(self, trainer, epoch):
        self._clear_bar()
        if self.writer is not None:
            self.writer.flush()

    def after_eval(self, trainer, metrics):
        st = trainer.state
        scalars = {k: float(v) for k, v in metrics.items() if is_number(v)}
        txt = " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
        log.info("eval epoch %d (iter %d): %s", st.epoch, st.iter, txt or "no metrics")
        if not (self._started and self._main):  # `up train -e`: the line only, no rows
            return
        self.table.write({"phase": "eval", "epoch": st.epoch, "iter": st.iter, **scalars,
                          "time": round(time.time(), 3)})
        if self.writer is not None:
            for k, v in scalars.items():
                self.writer.add_scalar(f"metrics/{k}", v, st.epoch)
            self.writer.flush()

    def _eta(self, iteration):
        per_iter = self._timer.per_iter()
        return None if per_iter is None else per_iter * max(self._total - iteration, 0)

    def _draw_bar(self, trainer, now):
        st = trainer.state
        frac = min(st.iter / max(self._total, 1), 1.0)
        self._bar.draw(frac, f"{100 * frac:5.1f}% epoch {st.epoch} [{st.epoch_iter}/{st.epoch_len}] "
                             f"eta {hms(self._eta(st.iter))}")
        self._bar_t = now

    # Any record of the "up" logger (another hook's line, a warning) first wipes the bar, so a
    # line never starts glued to it; the bar comes back at the next redraw.
    def _attach_bar_clearing(self):
        self._bar_handlers = list(logging.getLogger("up").handlers)
        for handler in self._bar_handlers:
            handler.addFilter(self._clear_bar_before_record)

    def _detach_bar_clearing(self):
        for handler in getattr(self, "_bar_handlers", ()):
            handler.removeFilter(self._clear_bar_before_record)
        self._bar_handlers = []

    def _clear_bar_before_record(self, record):
        self._clear_bar()
        return True

    def _clear_bar(self):
        if getattr(self, "_bar", None) is not None:
            self._bar.clear()

    def _close_bar(self, trainer=None):
        """The bar at its last position (a notebook keeps it), then no bar."""
        if getattr(self, "_bar", None) is not None:
            if trainer is not None:
                self._draw_bar(trainer, time.perf_counter())
            self._bar.close()
            self._bar = None
