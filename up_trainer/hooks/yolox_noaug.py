"""yolox_noaug (UP): the last ``no_aug_epoch`` epochs train on a plain pipeline with the L1 loss.

YOLOX trains most epochs on heavy mixing augmentation (mosaic, mixup, random perspective) and
finishes on images close to the evaluation distribution. From epoch ``S = max_epoch -
no_aug_epoch + 1`` (1-based: UP switches after ``max_epoch - no_aug_epoch`` whole epochs) this
hook

- rebuilds the training dataset from its config entry with the pipeline replaced by
  ``transformer`` (meta files are read again, as UP does), and the loader with it;
- sets the model's ``use_l1 = True`` (YOLOX adds the L1 loss on raw box offsets);
- evaluates every ``test_freq`` and saves every ``save_freq`` epochs (counted as the trainer's
  own frequencies are: iterations under ``runtime.iter_base``).

The switch happens on epoch S's ``before_train_loader``, i.e. after epoch S-1's evaluation and
checkpoint, which therefore still follow the run's own frequencies (as in UP). Everything is
a function of the epoch about to run, so a run resumed at any point, after the switch or from
the checkpoint saved right before it, switches exactly where an uninterrupted run did.
"""
import copy
import gc
import logging

from ..errors import ConfigError
from ..registry import DATASETS, HOOKS, check_kwargs
from .base import Hook

log = logging.getLogger("up")


@HOOKS.register("yolox_noaug")
class YoloxNoAug(Hook):
    """From epoch max_epoch - no_aug_epoch + 1: plain training pipeline, L1 loss, own test/save frequency.

    no_aug_epoch: the last epochs trained with `transformer` (UP's default 15; 0: never switches;
        max_epoch: every epoch).
    max_epoch: the epoch count the switch is counted back from (UP's files give trainer.max_epoch).
    transformer: the training pipeline of the last epochs (list of {type, kwargs}).
    test_freq: evaluate every test_freq epochs after the switch.
    save_freq: save ckpt_e{e}.pth every save_freq epochs after the switch.
    """

    # Before reload (HIGH): on a resume after the switch the plain dataset must be in place
    # before reload prepares its epoch from it.
    priority = "VERY_HIGH"

    def __init__(self, transformer: list, no_aug_epoch: int = 15, max_epoch: int = 300, test_freq: int = 1,
                 save_freq: int = 1):
        super().__init__()
        from ..tasks.transforms import build_transforms

        if max_epoch < 2:
            raise ConfigError("max_epoch", f"must be >= 2, got {max_epoch}")
        # 0: the switch never comes (UP's _v6aug files; UP's hook too); max_epoch: from the first epoch
        # (UP's hook then switches before the first iteration; a UP file's larger count is read as this)
        if not 0 <= no_aug_epoch <= max_epoch:
            raise ConfigError("no_aug_epoch", f"must be between 0 (never) and max_epoch = {max_epoch} (from the "
                              f"first epoch), got {no_aug_epoch}")
        for key, value in (("test_freq", test_freq), ("save_freq", save_freq)):
            if value < 1:
                raise ConfigError(key, f"must be >= 1, got {value}")
        if not transformer:
            raise ConfigError("transformer", "expected the training pipeline of the last epochs, got an empty list")
        build_transforms(transformer, "transformer")  # every type and kwarg checked now, not at epoch S
        self.transformer = transformer
        self.no_aug_epoch, self.max_epoch = no_aug_epoch, max_epoch
        self.test_freq, self.save_freq = test_freq, save_freq
        self.switch_epoch = max_epoch - no_aug_epoch + 1
        self.switched = False
        self._loaded_switched = None  # what the checkpoint said, compared with the epoch in before_train

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self):
        return {"switched": self.switched, "switch_epoch": self.switch_epoch}

    def load_state_dict(self, state):
        self._loaded_switched = bool(state["switched"])

    # -- events --------------------------------------------------------------------------------
    def before_train(self, trainer):
        self._check_run(trainer)
        st = trainer.state
        upcoming = st.epoch + 1 if st.epoch_done else st.epoch
        if self._loaded_switched is not None and self._loaded_switched != (upcoming >= self.switch_epoch):
            log.warning("yolox_noaug: the checkpoint was %s the switch, which with these kwargs comes at "
                        "epoch %d; this run follows the kwargs", "past" if self._loaded_switched else "before",
                        self.switch_epoch)
        if upcoming >= self.switch_epoch:
            self.switch(trainer, upcoming)

    def before_train_loader(self, trainer, epoch):
        if epoch >= self.switch_epoch and not self.switched:
            self.switch(trainer, epoch)

    # -- the switch ------------------------------------------------------------------------------
    def _check_run(self, trainer):
        """Start-up checks: the plain entry is a valid dataset entry, the model has use_l1."""
        self._plain_entry(trainer)
        if not hasattr(self._model(trainer), "use_l1"):
            log.warning("yolox_noaug: the model (%s) has no use_l1 attribute: the switch changes the pipeline "
                        "and frequencies only", type(self._model(trainer)).__name__)
        if self.no_aug_epoch == 0:
            log.info("yolox_noaug: no_aug_epoch 0, every epoch trains on the configured pipeline")
        elif self.switch_epoch > trainer.max_epoch:
            log.warning("yolox_noaug: the switch comes at epoch %d (max_epoch %d - no_aug_epoch %d + 1), after "
                        "this run's last epoch %d: it never happens", self.switch_epoch, self.max_epoch,
                        self.no_aug_epoch, trainer.max_epoch)
        elif self.max_epoch != trainer.max_epoch:
            log.warning("yolox_noaug: max_epoch %d differs from the run's %d epochs; the switch comes at epoch %d",
                        self.max_epoch, trainer.max_epoch, self.switch_epoch)

    @staticmethod
    def _model(trainer):
        module = trainer.module
        return getattr(module, "_orig_mod", module)  # under runtime.compile, the compiled model's own

    def _plain_entry(self, trainer):
        """The training set's config entry with its pipeline replaced by ``transformer``."""
        entry = copy.deepcopy(trainer.loaders.train_entry)
        if not isinstance(entry, dict) or "type" not in entry:
            raise ConfigError(f"hooks.{self.name}", "needs dataset.train given as {type, kwargs} to rebuild it")
        kwargs = dict(entry.get("kwargs") or {})
        kwargs["transforms"] = copy.deepcopy(self.transformer)  # the translation named it so (up_dataset.py)
        entry["kwargs"] = kwargs
        check_kwargs(DATASETS.get(entry["type"], "dataset.train.type"), kwargs, "dataset.train.kwargs")
        return entry

    def switch(self, trainer, epoch):
        from ..engine.builder import build_dataset

        loaders = trainer.loaders
        entry = self._plain_entry(trainer)
        old_len = len(loaders.train_set)
        loaders.set_train_set(None)  # release the augmenting dataset before the plain one is read
        gc.collect()
        dataset = build_dataset(entry, f"hooks.{self.name}.kwargs.transformer (dataset.train rebuilt)",
                                loaders.context)
        if len(dataset) != old_len:
            log.warning("yolox_noaug: the rebuilt training set has %d samples, the previous one %d",
                        len(dataset), old_len)
        loaders.set_train_set(dataset, entry=entry)  # a reload hook rebuilds from this entry from now on
        trainer.set_epoch_length(loaders.epoch_len())
        l1 = trainer.set_model_option("use_l1", True)
        trainer.set_frequencies(test_freq=self.test_freq, save_freq=self.save_freq)
        self.switched = True
        types = ", ".join(str(t.get("type")) if isinstance(t, dict) else "?" for t in self.transformer)
        log.info("yolox_noaug: epoch %d on trains without the mixing augmentation (pipeline: %s)%s; test_freq %d, "
                 "save_freq %d", epoch, types, ", L1 loss on" if l1 else "",
                 self.test_freq, self.save_freq)
