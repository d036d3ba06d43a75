"""auto_checkpoint: snapshot on signals and uncaught exceptions, at an iteration boundary.

Signal handlers only queue the signal's name (no IO inside a handler, Lightning style). The
queue is read at the next *boundary*: the end of an iteration that stepped the optimizer
(``trainer.did_update``; mid accumulation group the gradients are not in any checkpoint),
the start of an epoch, and the end of training. There the hook writes
``ckpt_e{e}-i{iter}.pth`` with the full state (model, optimizer, scheduler, scaler, EMA,
position, hook states, RNG) through the trainer's atomic store, which points
ckpt_latest.pth at it. SIGTERM/SIGINT then end the run with exit 143/130, SIGUSR1/SIGUSR2 let
it continue (UP's semantics). Signals that arrive during evaluation or a save are acted on
at the next boundary (the store holds them until a write is complete:
engine/checkpoint_signals.py); a stop request after the last iteration exits with its code
once the final checkpoint is written. The handlers are handed back only when no write of this
run is in flight any more.

Under DDP every rank must save and stop at the same iteration: at each boundary the ranks
all-reduce (MAX) one small int holding the most severe request any of them received. The
reduction runs on a gloo group on the CPU, so it never waits for the GPU.
"""
import collections
import logging
import os
import signal
import subprocess

from ..errors import ConfigError, TrainingInterrupted, did_you_mean
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
# Severity, reduced with MAX across ranks: a stop beats a snapshot request; SIGTERM (the
# scheduler's preemption) beats SIGINT.
_SEVERITY = {"SIGUSR1": 1, "SIGUSR2": 1, "SIGINT": 2, "SIGTERM": 3}
_BY_SEVERITY = {1: "SIGUSR1", 2: "SIGINT", 3: "SIGTERM"}
# Signals after whose snapshot `requeue: true` asks SLURM to requeue the job (preemption).
_REQUEUE_ON = ("SIGTERM", "SIGUSR1", "SIGUSR2")


def max_over_ranks(trainer, value, group=None):
    """The max of a small int over all ranks (the value itself without DDP)."""
    if not trainer.dist.enabled:
        return value
    import torch
    import torch.distributed as torch_dist

    if group is None:
        return int(trainer.dist.all_reduce_max(value))
    t = torch.tensor([value], dtype=torch.int32)
    torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX, group=group)
    return int(t.item())


def cpu_group(trainer):
    """A gloo process group for tiny CPU flags (None: use the default group as it is).

    Must be called on every rank at the same point (creating a group is a collective)."""
    if not trainer.dist.enabled:
        return None
    import torch.distributed as torch_dist

    if torch_dist.get_backend() == "gloo":
        return None
    try:
        return torch_dist.new_group(backend="gloo")
    except Exception as exc:  # no gloo in this build: the default group works, with a GPU sync
        log.warning("auto_checkpoint: no gloo group (%s); signal flags use the default backend", exc)
        return None


@HOOKS.register("auto_checkpoint")
class AutoCheckpoint(Hook):
    """Checkpoint when the job is told to stop (SIGINT/SIGTERM: exit 130/143) or asked to (SIGUSR1).

    signals: the signals to handle, among SIGINT, SIGTERM (snapshot, then exit 130/143) and
    SIGUSR1, SIGUSR2 (snapshot, training continues).
    requeue: after a SIGTERM/SIGUSR1 snapshot run ``scontrol requeue $SLURM_JOB_ID`` (rank 0,
    only under SLURM).
    on_exception: write a snapshot when training dies of an uncaught exception, then re-raise.
    """

    priority = "VERY_LOW"

    def __init__(self, signals: list = ("SIGINT", "SIGTERM", "SIGUSR1"), requeue: bool = False,
                 on_exception: bool = True):
        super().__init__()
        for i, name in enumerate(signals):
            if name not in _SEVERITY:
                hint = did_you_mean(str(name).upper(), _SEVERITY) or f"supported: {', '.join(_SEVERITY)}"
                raise ConfigError(f"signals[{i}]", f"unsupported signal {name!r}", hint)
        self.signals = list(dict.fromkeys(signals))
        self.requeue = requeue
        self.snapshot_on_exception = on_exception
        self._queue = collections.deque()  # appended by handlers; popleft is atomic w.r.t. them
        self._previous = {}
        self._group = None
        self._start_iter = None  # trainer.state.iter when this run's training began
        self._keyboard_stops = False  # no handlers installed: KeyboardInterrupt is the stop request

    # -- handlers --------------------------------------------------------------------------
    def _handler(self, signum, frame):
        name = signal.Signals(signum).name
        if name == "SIGINT" and "SIGINT" in self._queue:
            raise KeyboardInterrupt  # a second Ctrl-C before the boundary: stop right now
        self._queue.append(name)

    def _install(self):
        for name in self.signals:
            sig = getattr(signal, name)
            self._previous[sig] = signal.signal(sig, self._handler)

    def _restore_handlers(self):
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous = {}

    def _restore_handlers_after_writes(self, trainer, quietly=False):
        """Hand the signals back only once no checkpoint write is in flight: a signal landing
        during that write then reaches this hook's queue instead of killing the process with the
        file half written. ``quietly`` (another error is on its way): a failed write is logged."""
        try:
            trainer.store.flush()
        except TrainingInterrupted:  # a signal this hook does not handle came during the write
            if not quietly:
                raise
            log.warning("stop signal during the snapshot write: the write completed; the run ends with its error")
        except Exception as exc:
            if not quietly:
                raise
            log.error("checkpoint write failed as well: %s", exc)
        finally:
            self._restore_handlers()

    def _take(self):
        """The most severe queued request (0: none), emptying the queue."""
        level = 0
        while self._queue:
            level = max(level, _SEVERITY[self._queue.popleft()])
        return level

    # -- events -----------------------------------------------------------------------------
    def before_train(self, trainer):
        self._group = cpu_group(trainer)
        self._start_iter = trainer.state.iter
        self._keyboard_stops = not trainer.handle_signals
        if self._keyboard_stops:  # the caller's process (the Python API): its handlers stay as they are
            log.info("auto_checkpoint: signal handlers left to the caller; KeyboardInterrupt writes a snapshot")
            return
        self._install()
        log.info("auto_checkpoint: %s handled (snapshot at the next iteration boundary)", ", ".join(self.signals))

    def before_epoch(self, trainer, epoch):
        self._boundary(trainer)

    def after_update(self, trainer, iteration):
        if trainer.did_update:
            self._boundary(trainer)

    def after_train(self, trainer):
        self._restore_handlers_after_writes(trainer)  # a signal during the last write is queued: read after it
        level = max_over_ranks(trainer, self._take(), self._group)
        name = _BY_SEVERITY.get(level)
        if name in EXIT_CODES:  # a stop request after the last iteration: the final checkpoint exists
            raise TrainingInterrupted(EXIT_CODES[name], f"{name} received; training had finished")

    def on_exception(self, trainer, exc):
        try:
            self._on_exception(trainer, exc)
        finally:  # after the snapshot's write: a signal during it is queued here, not a kill
            self._restore_handlers_after_writes(trainer, quietly=True)

    def _on_exception(self, trainer, exc):
        # A stop request queued when training failed: most likely the failure came from the same
        # signal (a DataLoader worker that died of the process group's SIGTERM before it could
        # ignore it). The run ends the way the stop asks: snapshot, requeue, exit 143/130.
        stop = _BY_SEVERITY.get(max((_SEVERITY[n] for n in self._queue), default=0))
        stop = stop if stop in EXIT_CODES and not isinstance(exc, KeyboardInterrupt) else None
        if isinstance(exc, KeyboardInterrupt) and self._keyboard_stops:
            # No handler of ours: Python's own SIGINT handler raised it (a notebook's interrupt
            # button). It asks what SIGINT asks: the snapshot of the last update, then stop.
            stop = "SIGINT"
        if stop is None and (not self.snapshot_on_exception or isinstance(exc, KeyboardInterrupt)):
            return
        trained = trainer.state.iter != self._start_iter
        if stop is None and not trained:
            return  # nothing trained yet (bad data in the first batch): a snapshot would only move latest
        written = trained and self._exception_snapshot(trainer, exc)
        if stop is None:
            return
        if self.requeue and stop in _REQUEUE_ON and trainer.dist.is_main:
            trainer.store.flush()
            requeue_slurm_job()
        what = "snapshot written" if written else "latest checkpoint kept"
        if isinstance(exc, KeyboardInterrupt):
            trainer.interrupted = TrainingInterrupted(EXIT_CODES[stop], f"KeyboardInterrupt; {what}, stopping")
            return
        cause = (str(exc).strip().splitlines() or [""])[0][:200]
        trainer.interrupted = TrainingInterrupted(
            EXIT_CODES[stop], f"{stop} received; {what}, exiting ({type(exc).__name__} on the way: {cause})")

    def _exception_snapshot(self, trainer, exc):
        """Rank 0 writes the state of the last completed update, when it is one; True if written."""
        # trainer.at_update_boundary, not a flag of this hook's own after_update: a hook that runs
        # before it (the logger, on a full disk) may be what failed.
        if not trainer.at_update_boundary or not trainer.dist.is_main:
            return False  # mid accumulation group: no consistent state / only rank 0 writes
        if trainer.checkpoints.is_saved(trainer.state):
            return True  # nothing new since the last checkpoint
        try:
            # No barrier: the other ranks may not be here. Rank 0 writes on its own.
            name = trainer.checkpoints.interrupt_name(trainer.state)
            log.error("exception %s: writing %s", type(exc).__name__, name)
            trainer.store.save(trainer.checkpoint_dict(), [name])
            return True
        except Exception as save_exc:  # the original exception matters more
            log.error("could not write the exception snapshot: %s", save_exc)
            return False

    # -- acting at a boundary ---------------------------------------------------------------
    def _boundary(self, trainer):
        level = max_over_ranks(trainer, self._take(), self._group)
        if not level:
            return
        name = _BY_SEVERITY[level]
        self.snapshot(trainer, f"{name} received")
        if self.requeue and name in _REQUEUE_ON and trainer.dist.is_main:
            trainer.store.flush()  # the snapshot is on disk before SLURM may kill the job
            requeue_slurm_job()
        if name in EXIT_CODES:
            self._restore_handlers_after_writes(trainer)
            raise TrainingInterrupted(EXIT_CODES[name], f"{name} received; snapshot written, exiting")

    def snapshot(self, trainer, why):
        st = trainer.state
        # Every rank records the saves it took part in, so all take the same branch here
        # (save_checkpoint holds a barrier) without a reduction.
        if trainer.checkpoints.is_saved(st):
            # The checkpoint just written (end of epoch) already holds this state and
            # ckpt_latest.pth points at it; another copy would only cost time in a grace period.
            log.info("%s: the state at iteration %d is already saved (ckpt_latest.pth)", why, st.iter)
            return
        name = trainer.checkpoints.interrupt_name(st)
        log.info("%s: writing %s at epoch %d batch %d/%d", why, name, st.epoch, st.epoch_iter, st.epoch_len)
        trainer.save_checkpoint([name])


def requeue_slurm_job():
    """``scontrol requeue $SLURM_JOB_ID``; failures are logged, never raised (the save is done)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        log.warning("auto_checkpoint: requeue requested but SLURM_JOB_ID is not set (not under SLURM)")
        return False
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error("auto_checkpoint: scontrol requeue %s failed: %s", job, exc)
        return False
    if done.returncode != 0:
        log.error("auto_checkpoint: scontrol requeue %s exited %d: %s", job, done.returncode,
                  (done.stderr or done.stdout).strip())
        return False
    log.info("auto_checkpoint: requeued SLURM job %s", job)
    return True
