"""Shared by the benchmarks that time `up train`'s loop against a bare PyTorch loop in one process.

The two loops run interleaved, one epoch each in turn: a hook at the trainer's epoch boundary
runs the bare loop's next epoch, so every up epoch is measured next to the bare epoch with the
same number, seconds apart. On a machine whose speed drifts over minutes, ratios of such
neighbours are far steadier than ratios of whole runs measured one after the other.

A benchmark supplies the bare loop as a generator (set-up, then one epoch per ``next()``) and two
callables: ``start(loop)`` taken when an epoch begins, ``finish(loop, started)`` turning it into
that epoch's record (wall time, compute time, page faults, peak memory: whatever it measures).
"""
import time

from up_trainer.hooks.base import Hook


class Stopwatch:
    """Seconds spent inside ``with watch:`` blocks, summed."""

    def __init__(self):
        self.total = 0.0

    def __enter__(self):
        self._start = time.perf_counter()

    def __exit__(self, *exc):
        self.total += time.perf_counter() - self._start


def time_calls(obj, name, watch):
    """Count the time of every ``obj.name(...)`` call on ``watch`` (an instance attribute wraps it)."""
    method = getattr(obj, name)

    def timed(*args, **kwargs):
        with watch:
            return method(*args, **kwargs)
    setattr(obj, name, timed)


class Interleave(Hook):
    """Runs the bare loop's epochs between the trainer's and records each epoch of both loops.
    ``bare_first`` puts the bare epoch before the up epoch of the same number (benchmarks swap
    it every repeat). An up epoch ends once its background checkpoint write is on disk, so the
    write never overlaps the bare loop's epoch (it counts against up)."""

    def __init__(self, bare, bare_first, start, finish):
        super().__init__()
        self.bare, self.bare_first = bare, bare_first
        self.start, self.finish = start, finish
        self.epochs = {"bare": [], "up": []}
        self.up_started = None

    def _bare_epoch(self):
        started = self.start("bare")
        next(self.bare)
        self.epochs["bare"].append(self.finish("bare", started))

    def _up_epoch_over(self, trainer):
        if self.up_started is not None:
            trainer.store.flush()
            self.epochs["up"].append(self.finish("up", self.up_started))
            if not self.bare_first:
                self._bare_epoch()

    def before_epoch(self, trainer, epoch):
        self._up_epoch_over(trainer)
        if self.bare_first:
            self._bare_epoch()
        self.up_started = self.start("up")

    def after_train(self, trainer):
        self._up_epoch_over(trainer)


def train_interleaved(trainer, bare, bare_first, start, finish):
    """Train ``trainer`` with the bare loop's epochs in between; {loop: [record per epoch]}.
    ``bare`` must have been advanced past its set-up."""
    clock = trainer.hooks.add(Interleave(bare, bare_first, start, finish), priority="HIGHEST")
    trainer.train()
    return clock.epochs
