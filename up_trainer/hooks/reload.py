"""reload (UP): rebuild the training dataset every `group` epochs; split passes into mini-epochs.

Rebuilding constructs ``dataset.train`` again from the config, so meta/annotation files are
read again (samples appended to a meta file between epochs are trained on from the next
rebuild) and the old dataset's memory is released before the new one is built.

``mini_epoch: M`` cuts one pass over a large dataset into M epochs: pass p (epochs
p*M+1 .. p*M+M) shuffles the dataset with a seed of its own (runtime.seed, p) and epoch
p*M+k+1 trains on the k-th of M equal slices of that permutation, in an order the sampler
seeds by (runtime.seed, epoch). ``max_epoch`` then counts mini-epochs and the schedule keys
(test_freq, save_freq, group) do too. Every choice is a function of (seed, epoch, dataset
length), so a run resumed at any epoch or mid-epoch sees the same samples in the same order.

When the epoch's data is prepared: before training (for the epoch about to run, after a
resume too, without a rebuild: the builder has just read the data), and then on every
``before_train_loader(epoch)`` event, i.e. after the previous epoch's evaluation and
checkpoint, so a broken meta file never costs that save. The epoch length follows the slice
(``trainer.set_epoch_length``). Note that per-iteration LR schedules
are sized from the full dataset's length when the optimizer is built; give them lengths in
mini-epoch iterations (e.g. CosineAnnealingLR T_max) when using mini_epoch.
"""
import gc
import logging

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")


def mini_epoch_indices(n, epoch, mini_epoch, seed):
    """Sample indices of 1-based ``epoch`` when one pass over ``n`` samples spans ``mini_epoch`` epochs."""
    pass_index, k = divmod(epoch - 1, mini_epoch)
    g = torch.Generator().manual_seed((seed * 1_000_003 + 7_919 * (pass_index + 1)) % (2**63))
    order = torch.randperm(n, generator=g)
    return order[k * n // mini_epoch:(k + 1) * n // mini_epoch].tolist()


@HOOKS.register("reload")
class Reload(Hook):
    """Rebuild the training dataset/loader from the config every `group` epochs; mini_epoch splits a pass.

    group: rebuild at the start of epochs 1+group, 1+2*group, ... (re-reading meta files).
    mini_epoch: split one pass over the training set into this many epochs.
    """

    priority = "HIGH"  # epoch_len must be final before the logger reads it in before_train

    def __init__(self, group: int = 1, mini_epoch: int = 1):
        super().__init__()
        if group < 1:
            raise ConfigError("group", f"must be >= 1, got {group}")
        if mini_epoch < 1:
            raise ConfigError("mini_epoch", f"must be >= 1, got {mini_epoch}")
        self.group = group
        self.mini_epoch = mini_epoch
        self.reloads = 0  # rebuilds in this process (diagnostics, tests)
        self._prepared = None  # the epoch the loader factory is set up for

    def before_train(self, trainer):
        st = trainer.state
        self.prepare(trainer, st.epoch + 1 if st.epoch_done else st.epoch, rebuild=False)

    def before_train_loader(self, trainer, epoch):
        # after yolox_noaug's (VERY_HIGH): a rebuild reads the entry with its plain pipeline
        if epoch != self._prepared:
            self.prepare(trainer, epoch, rebuild=(epoch - 1) % self.group == 0)

    def prepare(self, trainer, epoch, rebuild):
        loaders = trainer.loaders
        dataset = loaders.train_set
        if rebuild:
            from ..engine.builder import build_dataset

            loaders.set_train_set(None)  # drop the old samples before reading the new ones
            dataset = None
            gc.collect()
            dataset = build_dataset(loaders.train_entry, "dataset.train", loaders.context)
            self.reloads += 1
        indices = None
        if self.mini_epoch > 1:
            if len(dataset) < self.mini_epoch:
                raise ConfigError(f"hooks.{self.name}.kwargs.mini_epoch",
                                  f"{self.mini_epoch} mini-epochs need at least as many samples, "
                                  f"the training set has {len(dataset)}")
            indices = mini_epoch_indices(len(dataset), epoch, self.mini_epoch, trainer.cfg["runtime"]["seed"])
        loaders.set_train_set(dataset, indices)
        self._prepared = epoch
        old_len = trainer.state.epoch_len
        trainer.set_epoch_length(loaders.epoch_len())
        if rebuild or old_len != trainer.state.epoch_len:
            what = f"{len(dataset)} samples" + (f", mini-epoch slice of {len(indices)}" if indices else "")
            log.info("reload: epoch %d trains on %s (%d iterations)%s", epoch, what, trainer.state.epoch_len,
                     " (dataset rebuilt)" if rebuild else "")
