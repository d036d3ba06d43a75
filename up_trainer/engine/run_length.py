"""How long a run trains, and in which unit its periodic work (evaluation, saves) is counted.

The trainer is epoch based. UP is iteration based, and a UP file may say how long to train in
iterations; this maps that onto epochs:

- ``max_epoch: 90`` (an int): 90 whole epochs, as always.
- ``max_iter: 125000``, or a fractional ``max_epoch: 12.278`` (UP: ``int(max_epoch x epoch_len)``
  iterations): the run lasts exactly that many iterations. It has ``ceil(total / epoch_len)``
  epochs and the last one stops early; that short epoch is the last epoch (``e == max_epoch``)
  for the checkpoint schedule. ``max_iter`` wins when both are given, as in UP.
- ``runtime.iter_base: true`` (UP): ``test_freq``, ``test_start``, ``save_freq``, ``save_start``,
  ``save_cur_*`` and ``save_latest_freq`` count iterations instead of epochs, and they are checked
  after every iteration; the LR schedule's epoch-valued kwargs count updates.

Iteration counts are fixed when the run is built, from the epoch length at that time (a
``reload`` hook that changes epoch lengths later does not change them).
"""
import math

from ..errors import ConfigError


def check_epoch_len(loaders, ds_cfg, world_size=1):
    """Refuse, before anything trains, a training set that gives no batch at all: empty, or
    smaller than one batch with ``drop_last`` (per process: under DDP each process gets
    1/world_size of the samples). Training 0 iterations would save an untrained checkpoint and
    exit 0 as if all went well."""
    if loaders.epoch_len() > 0:
        return
    total = len(loaders.train_set)
    if total == 0:
        raise ConfigError("dataset.train", "the training set is empty (0 samples)",
                          "check its path, list file or subset")
    shard = math.ceil(total / world_size)
    bs = ds_cfg["batch_size"]
    if not ds_cfg.get("drop_last"):  # no sampler here yields nothing from samples, but say so if one does
        raise ConfigError("dataset.train", f"{total} training samples give no batch of {bs} on this process")
    per_process = f" ({shard} per process on {world_size} processes)" if world_size > 1 else ""
    raise ConfigError("dataset.batch_size", f"{bs} is larger than the {total} training samples{per_process} and "
                      "dataset.drop_last is true, so an epoch would have 0 iterations",
                      f"set dataset.batch_size to at most {shard}, or dataset.drop_last: false")


class RunLength:
    def __init__(self, trainer_cfg, epoch_len, iter_base=False):
        max_epoch, max_iter = trainer_cfg.get("max_epoch"), trainer_cfg.get("max_iter")
        self.iter_base = bool(iter_base)
        self.epoch_len = max(1, epoch_len)
        if max_iter is not None:
            self.total_iters = int(max_iter)
        elif isinstance(max_epoch, float) and not max_epoch.is_integer():
            self.total_iters = max(1, int(max_epoch * self.epoch_len))
        else:
            self.total_iters = None  # whole epochs
        if self.total_iters is None:
            self.max_epoch = int(max_epoch)
        else:
            self.max_epoch = max(1, math.ceil(self.total_iters / self.epoch_len))

    @property
    def iterations(self):
        """Iterations of the whole run (at the epoch length the run was built with)."""
        return self.total_iters if self.total_iters is not None else self.max_epoch * self.epoch_len

    @property
    def epochs(self):
        """The run's length in epochs, fractional when it stops inside an epoch."""
        return self.iterations / self.epoch_len if self.total_iters is not None else self.max_epoch

    def epoch_batches(self, iters_before, epoch_len):
        """Batches to train in an epoch that starts after ``iters_before`` iterations."""
        if self.total_iters is None:
            return epoch_len
        return max(0, min(epoch_len, self.total_iters - iters_before))

    def resume_point(self, position):
        """Where a saved training position (TrainState's dict) lies in this run: "past" its end,
        at its "end" (nothing left to train), or None (inside: training continues).

        A position is past the end when it has trained further than this run would: more epochs
        than ``max_epoch`` (or more iterations than ``max_iter``). It is at the end when this
        run's last epoch is complete, its end-of-epoch work (evaluation, saves) included; a
        snapshot taken after the last iteration but before that work is inside, and the resume
        does the work. The start of epoch max_epoch + 1 (a snapshot taken before its first
        batch) is the end of epoch max_epoch."""
        epoch, done = position["epoch"], position.get("epoch_done", True)
        if self.total_iters is not None:
            if position["iter"] > self.total_iters:
                return "past"
            return "end" if position["iter"] == self.total_iters and done else None
        completed = epoch if done else epoch - 1
        started = 0 if done else position.get("epoch_iter", 0)  # batches of the epoch in progress
        if completed > self.max_epoch or (completed == self.max_epoch and started > 0):
            return "past"
        return "end" if completed == self.max_epoch else None

    def length_key(self, trainer_cfg):
        """The config key that sets this run's length, as the user wrote it."""
        return "trainer.max_iter" if trainer_cfg.get("max_iter") is not None else "trainer.max_epoch"

    def describe(self):
        if self.total_iters is None:
            what = f"{self.max_epoch} epochs of {self.epoch_len} iterations"
        else:
            what = (f"{self.total_iters} iterations = {self.epochs:.4g} epochs of {self.epoch_len} "
                    f"(the last epoch, {self.max_epoch}, stops after "
                    f"{self.total_iters - (self.max_epoch - 1) * self.epoch_len} iterations)")
        unit = "iterations (runtime.iter_base)" if self.iter_base else "epochs"
        return f"training for {what}; test/save frequencies count {unit}"
