"""DataLoaders whose every random choice is a function of (seed, epoch, position in the epoch).

Augmentations draw from torch's generator seeded per batch by (seed, epoch, position), so a
batch gets the same augmentation whether it is loaded in the main process or a worker, in an
uninterrupted run or after a mid-epoch resume. The global RNG state is restored after each
batch, so data loading never shifts the model's random stream.

The training sampler hands the dataset ``(epoch, index)`` pairs rather than bare indices, so the
epoch reaches the seeding even inside worker processes that outlive an epoch
(``dataset.persistent_workers``): with them one DataLoader serves every epoch.
"""
import math
import sys

import torch
from torch.utils.data import Dataset, Sampler, Subset, default_collate

from ..protocols import PerBatch
from .batching import AspectRatioBatchSampler, MixCollate, PadCollate, aspect_ratios_of, build_batch_fn
from .repeat_factor import RepeatFactorSampler, image_classes_of, repeat_factors
from .sample_errors import fetch_sample
from .sampler import ResumableSampler
# The worker side of the loaders (worker_loader.py); end_loader_workers is also imported from here.
from .worker_loader import PERSISTENT_LOADERS, WorkerTrackingLoader, end_loader_workers, ignore_stop_signals  # noqa: F401


class SeededDataset(Dataset):
    """Draws each batch's augmentation from torch's default generator seeded by
    (seed, epoch, first index of the batch), then restores the generator. Training items are
    ``(epoch, index)`` pairs (:class:`EpochTagged`); the epoch they carry is kept in
    ``self.epoch`` for the collate step that follows in the same process (``MixCollate``).

    DataLoader fetches a whole batch through ``__getitems__`` (in the main process or in one
    worker), so one seeding per batch suffices. ``torch.default_generator.manual_seed`` is used
    rather than ``torch.manual_seed``, which also seeds every accelerator backend and costs
    milliseconds.
    """

    def __init__(self, dataset, seed, split="dataset.train"):
        self.dataset = dataset
        self.seed = seed
        self.split = split  # what an error in a sample names (sample_errors.py)
        self.epoch = 0

    def __len__(self):
        return len(self.dataset)

    def _seeded(self, first_index, fetch):
        gen = torch.default_generator
        saved = gen.get_state()
        gen.manual_seed(((self.seed * 1_000_003 + self.epoch) * 10_000_019 + first_index) % (2**63))
        try:
            return fetch()
        finally:
            gen.set_state(saved)

    def __getitem__(self, item):
        self.epoch, index = item
        return self._seeded(index, lambda: fetch_sample(self.dataset, index, self.split))

    def __getitems__(self, items):
        self.epoch = items[0][0]
        return self._seeded(items[0][1], lambda: self._batch([i for _, i in items]))

    def _batch(self, indices):
        """The samples of one batch; a dataset with per-batch choices (a multi-scale size every
        image of the batch shares) draws them first, from the freshly seeded generator."""
        inner = self.dataset
        while isinstance(inner, Subset):
            inner = inner.dataset
        if not isinstance(inner, PerBatch):
            return [fetch_sample(self.dataset, i, self.split) for i in indices]
        inner.begin_batch()
        try:
            return [fetch_sample(self.dataset, i, self.split) for i in indices]
        finally:
            inner.end_batch()


class NamedSamples(Dataset):
    """The evaluation set as the loader reads it: each sample fetched through
    :func:`~up_trainer.data.sample_errors.fetch_sample`, as the training set's are."""

    def __init__(self, dataset, split="dataset.test"):
        self.dataset = dataset
        self.split = split

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return fetch_sample(self.dataset, index, self.split)


class EpochTagged(Sampler):
    """Tags every index a sampler (or every batch a batch sampler) yields with ``epoch``, the
    augmentation epoch of the current iteration (see the module docstring)."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.epoch = 0

    def __iter__(self):
        epoch = self.epoch
        for item in self.sampler:
            yield [(epoch, i) for i in item] if isinstance(item, list) else (epoch, item)

    def __len__(self):
        return len(self.sampler)


def collate_fn_of(dataset):
    return getattr(dataset, "collate_fn", None) or default_collate


def _accelerator_available():
    accelerator = getattr(torch, "accelerator", None)
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


class LoaderFactory:
    """Builds the per-epoch training loader and the evaluation loader for one dataset pair.

    With ``persistent_workers`` each loader is built once and reused (its workers stay alive);
    otherwise a fresh one per epoch / evaluation, whose workers end with it.
    """

    def __init__(self, ds_cfg, train_set, test_set, seed, rank=0, world_size=1, context=None):
        self.cfg = ds_cfg
        self.context = context  # the run's DataContext: rebuilt training sets (reload hooks) read with it
        self.train_set = train_set
        self.test_set = test_set
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self._seeded = SeededDataset(train_set, seed) if train_set is not None else None
        # The config entry the training set is (re)built from; yolox_noaug swaps its pipeline.
        self.train_entry = ds_cfg.get("train")
        self.batch_fn = build_batch_fn(ds_cfg.get("batch_fn")) if train_set is not None else None
        self._aspect_ratios = None
        if train_set is not None and ds_cfg.get("aspect_ratio_groups"):
            self._aspect_ratios = aspect_ratios_of(train_set)
        self._repeats = None  # repeat-factor sampling: how often each training image appears per epoch
        if train_set is not None and ds_cfg.get("repeat_factor"):
            self._repeats = repeat_factors(image_classes_of(train_set), **ds_cfg["repeat_factor"])
        self._train = None  # (loader, sampler, tagged), kept with persistent workers
        self._test = None
        self.schedule = None  # the run's Schedule (see follow): persistent_workers null reads its epochs

    def follow(self, schedule):
        """Serve the run ``schedule`` describes. The schedule is sized from this factory's
        :meth:`epoch_len`, so it comes after construction; only :meth:`persistent` reads it."""
        self.schedule = schedule

    def set_train_set(self, train_set, indices=None, entry=None):
        """Swap the training dataset (the reload hook); ``indices`` restricts epochs to those samples;
        ``entry``: the config entry rebuilds read from now on (yolox_noaug's plain pipeline)."""
        if entry is not None:
            self.train_entry = entry
        self.train_set = train_set
        self._seeded = SeededDataset(train_set if indices is None else Subset(train_set, list(indices)), self.seed)
        if self._aspect_ratios is not None and train_set is not None:  # None: released before a rebuild
            ratios = aspect_ratios_of(train_set)
            self._aspect_ratios = ratios if indices is None else [ratios[i] for i in indices]
        if self._repeats is not None and train_set is not None:
            classes = image_classes_of(train_set)
            classes = classes if indices is None else [classes[i] for i in indices]
            self._repeats = repeat_factors(classes, **self.cfg["repeat_factor"])
        self._train = None  # workers hold the old dataset

    def persistent(self):
        """``dataset.persistent_workers``; null: on when there are workers and the run has more
        than one epoch. Starting an epoch's workers costs a fork each and the first batches'
        latency; kept ones serve every epoch (the loader's seeding keeps every batch identical)."""
        setting = self.cfg.get("persistent_workers")
        if setting is None:
            epochs = self.schedule.max_epoch if self.schedule is not None else 1
            return self.cfg["num_workers"] > 0 and epochs > 1
        return setting

    def _common(self):
        nw = self.cfg["num_workers"]
        # Pinned memory needs an accelerator; without one torch warns on every loader (UP files
        # carry pin_memory: true, and run on CPU here too), and pinning would change nothing.
        kwargs = dict(num_workers=nw, pin_memory=self.cfg["pin_memory"] and _accelerator_available(),
                      persistent_workers=self.persistent(),
                      worker_init_fn=ignore_stop_signals if nw else None,
                      transport=self.cfg.get("worker_transport", "ring"))
        if self.cfg.get("prefetch_factor") is not None:
            kwargs["prefetch_factor"] = self.cfg["prefetch_factor"]
        if nw and sys.platform.startswith("linux"):
            # Workers inherit what the main process set up before they start (the data set with
            # its DataContext and the image cache's arena, the batch ring): fork, Linux's default until Python 3.14
            # made it forkserver, which would pickle the data set into each worker instead.
            kwargs["multiprocessing_context"] = "fork"
        return kwargs

    def _keep(self, loader):
        if self.persistent():
            PERSISTENT_LOADERS.add(loader)
            return loader
        return None

    def _train_sampler(self):
        kwargs = dict(shuffle=True, seed=self.seed, rank=self.rank, world_size=self.world_size)
        if self._repeats is not None:
            return RepeatFactorSampler(self._repeats, **kwargs)
        return ResumableSampler(len(self._seeded), **kwargs)

    def epoch_len(self):
        n = self._train_sampler().shard_len()
        bs = self.cfg["batch_size"]
        return n // bs if self.cfg["drop_last"] else math.ceil(n / bs)

    def _collate(self, dataset):
        collate = collate_fn_of(dataset)
        if self.cfg.get("alignment", 1) > 1:
            collate = PadCollate(collate, self.cfg["alignment"], self.cfg.get("pad_value", 0))
        return collate

    def train_loader(self, epoch, start_batch=0):
        loader, sampler, tagged = self._train or self._build_train_loader(epoch)
        self._train = (loader, sampler, tagged) if self._keep(loader) else None
        # fix_seed (UP): every epoch walks the order of epoch 0; augmentation still varies by epoch.
        order_epoch = 0 if self.cfg.get("fix_seed") else epoch
        self._seeded.epoch = tagged.epoch = epoch
        if self._aspect_ratios is not None:
            sampler.set_epoch(order_epoch)
            tagged.sampler.start_batch = start_batch
        else:
            sampler.set_epoch(order_epoch, start_batch * self.cfg["batch_size"])
        return loader

    def _build_train_loader(self, epoch):
        sampler = self._train_sampler()
        collate = self._collate(self.train_set)
        if self.batch_fn is not None:
            collate = MixCollate(collate, self.batch_fn, self._seeded)
        # An explicit generator keeps DataLoader from drawing its base seed from the global RNG.
        gen = torch.Generator().manual_seed(self.seed + epoch)
        bs = self.cfg["batch_size"]
        if self._aspect_ratios is not None:
            tagged = EpochTagged(AspectRatioBatchSampler(sampler, self._aspect_ratios, self.cfg["aspect_ratio_groups"],
                                                         bs, self.cfg["drop_last"]))
            loader = WorkerTrackingLoader(self._seeded, batch_sampler=tagged, collate_fn=collate, generator=gen,
                                **self._common())
        else:
            tagged = EpochTagged(sampler)
            loader = WorkerTrackingLoader(self._seeded, batch_size=bs, sampler=tagged, drop_last=self.cfg["drop_last"],
                                collate_fn=collate, generator=gen, **self._common())
        return loader, sampler, tagged

    def test_loader(self):
        if self._test is not None:
            return self._test
        sampler = ResumableSampler(len(self.test_set), shuffle=False, rank=self.rank,
                                   world_size=self.world_size, pad=False)
        bs = self.cfg["test_batch_size"] or self.cfg["batch_size"]
        loader = WorkerTrackingLoader(NamedSamples(self.test_set), batch_size=bs, sampler=sampler, collate_fn=self._collate(self.test_set),
                            generator=torch.Generator().manual_seed(self.seed), **self._common())
        self._test = self._keep(loader)
        return loader
