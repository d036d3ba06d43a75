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

    def schedule_cfg(self, trainer_cfg):
        """The trainer section as engine/schedule.py reads it: ``max_epoch`` is the final
        position (the last epoch, or under iter_base the last iteration)."""
        last = self.iterations if self.iter_base else self.max_epoch
        return dict(trainer_cfg, max_epoch=last)

    def describe(self):
        if self.total_iters is None:
            what = f"{self.max_epoch} epochs of {self.epoch_len} iterations"
        else:
            what = (f"{self.total_iters} iterations = {self.epochs:.4g} epochs of {self.epoch_len} "
                    f"(the last epoch, {self.max_epoch}, stops after "
                    f"{self.total_iters - (self.max_epoch - 1) * self.epoch_len} iterations)")
        unit = "iterations (runtime.iter_base)" if self.iter_base else "epochs"
        return f"training for {what}; test/save frequencies count {unit}"
