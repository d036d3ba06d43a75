"""Checkpoint policy: under which names a state is saved, and which numbered files are kept.

:class:`~up_trainer.engine.checkpoint.CheckpointStore` writes files; this decides. At the end
of epoch e (1-based; or, under runtime.iter_base, after iteration e), as the run's
:class:`~up_trainer.engine.schedule.Schedule` says:

- periodic: ``ckpt_e{e}.pth`` if e is the final position or (e >= save_start and e % save_freq == 0);
- latest: ``ckpt_latest.pth`` ("current") if save_cur_start > 0, e >= save_cur_start and
  e % save_cur_freq == 0. UP's only_save_latest replaces the per-epoch files by
  ckpt_latest.pth every save_latest_freq epochs and at the last epoch. Every other save
  points ckpt_latest.pth at itself too (the store does that);
- best, and any other name a hook asks for this epoch (:meth:`CheckpointPolicy.request`):
  auto_save_best requests ``ckpt_best.pth`` when the monitored metric improves;
- interrupt snapshots (auto_checkpoint, on a signal or an exception): ``ckpt_e{e}-i{iter}.pth``,
  none when the state at this iteration is already saved (:meth:`CheckpointPolicy.is_saved`);
- keep-N (:meth:`CheckpointPolicy.rotate`, ``keep`` >= 1): only the newest N numbered files
  (``ckpt_e{e}.pth`` and interrupt snapshots ``ckpt_e{e}-i{iter}.pth``) stay.

Rotation is save-before-delete: the trainer runs it when a new checkpoint is already on disk
(the start of the next epoch, the end of training) and it counts the files that exist, so a
crash can leave one file too many, never one too few. ckpt_best.pth and ckpt_latest.pth are
other names (hard links) and are never touched, nor is the numbered file ckpt_latest.pth
names (what a resume would load). A numbered file's ``.safetensors`` export goes with it.
"""
import logging
import math
import os

from .checkpoint import LATEST, epoch_name, interrupt_name, parse_name

log = logging.getLogger("up")


class CheckpointPolicy:
    """The trainer's one checkpoint policy (``trainer.checkpoints``); see the module docstring."""

    def __init__(self, schedule=None, keep=-1):
        self.schedule = schedule  # the run's Schedule (None: only requested names are ever due)
        self.keep = keep  # newest numbered files kept; -1 keeps all (auto_save_best's max_keep_ckpts)
        self.requested = []  # extra names hooks asked for at this epoch's end
        # The iteration whose state was last saved through the trainer. Set on every rank
        # (Trainer.save_checkpoint runs on all), so ranks agree without communicating.
        self.saved_iter = None

    def set_keep(self, keep):
        """Keep only the newest ``keep`` numbered files (-1: all); see :meth:`rotate`."""
        self.keep = keep

    def request(self, name):
        """Save this epoch's end state under ``name`` too (e.g. ckpt_best.pth)."""
        if name not in self.requested:
            self.requested.append(name)

    def names_due(self, epoch, periodic_name=None):
        """Every name the state at the end of ``epoch`` is due under; clears the requests.

        ``epoch`` is a position in the schedule's unit (under runtime.iter_base the global
        iteration) and ``periodic_name`` the file a periodic save goes to (default
        ``ckpt_e{epoch}.pth``)."""
        s = self.schedule
        names = [periodic_name or epoch_name(epoch)] if s is not None and s.save_due(epoch) else []
        if s is not None and s.latest_due(epoch):
            names.append(LATEST)
        names += [n for n in self.requested if n not in names]
        self.requested = []
        return names

    def is_saved(self, state):
        """Whether the state at ``state.iter`` is on disk already (latest names it)."""
        return self.saved_iter is not None and self.saved_iter == state.iter

    @staticmethod
    def interrupt_name(state):
        return interrupt_name(state.epoch, state.iter)

    def rotate(self, store):
        """Keep-N: delete the oldest numbered files beyond ``keep``; returns the removed paths."""
        if self.keep < 0:
            return []
        store.flush()  # with async_write the newest checkpoint may still be in flight: finish it first
        numbered = []
        if os.path.isdir(store.save_dir):
            for name in os.listdir(store.save_dir):
                parsed = parse_name(name)
                if parsed:  # an epoch file sorts after the interrupt snapshots of its epoch
                    numbered.append(((parsed[0], math.inf if parsed[1] is None else parsed[1]), name))
        numbered.sort()
        latest = _inode(store.path(LATEST))
        removed = []
        for _, name in numbered[: max(len(numbered) - self.keep, 0)]:
            path = store.path(name)
            if latest is not None and _inode(path) == latest:
                continue  # what a resume would load; never removed, even when it is not the newest
            for victim in (path, os.path.splitext(path)[0] + ".safetensors"):
                try:
                    os.unlink(victim)
                except FileNotFoundError:
                    continue
                removed.append(victim)
        if removed:
            log.info("max_keep_ckpts=%d: removed %s", self.keep, ", ".join(os.path.basename(p) for p in removed))
        return removed


def _inode(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
