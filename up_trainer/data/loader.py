"""DataLoaders whose every random choice is a function of (seed, epoch, position in the epoch).

Augmentations draw from torch's generator seeded per batch by (seed, epoch, position), so a
batch gets the same augmentation whether it is loaded in the main process or a worker, in an
uninterrupted run or after a mid-epoch resume. The global RNG state is restored after each
batch, so data loading never shifts the model's random stream.

The training sampler hands the dataset ``(epoch, index)`` pairs rather than bare indices, so the
epoch reaches the seeding even inside worker processes that outlive an epoch
(``dataset.persistent_workers``): with them one DataLoader serves every epoch.
"""
import atexit
import math
import multiprocessing
import signal
import sys
import weakref

import torch
from torch.utils.data import DataLoader, Dataset, Sampler, Subset, default_collate

from .batch_ring import BatchRing, RingCollate, unpack
from ..errors import DataError
from .batching import AspectRatioBatchSampler, MixCollate, PadCollate, aspect_ratios_of, build_batch_fn
from .repeat_factor import RepeatFactorSampler, image_classes_of, repeat_factors
from .sample_errors import fetch_sample, worker_error_as_raised
from .sampler import ResumableSampler
from .worker_death import record_workers, worker_death


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
        begin, end = getattr(inner, "begin_batch", None), getattr(inner, "end_batch", None)
        if begin is None:
            return [fetch_sample(self.dataset, i, self.split) for i in indices]
        begin()
        try:
            return [fetch_sample(self.dataset, i, self.split) for i in indices]
        finally:
            end()


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


def ignore_stop_signals(worker_id):
    """DataLoader ``worker_init_fn``: workers ignore SIGTERM and SIGINT.

    SLURM preemption, ``scancel`` and a terminal's Ctrl-C signal the whole process group. The
    main process decides what a stop means (snapshot at the next boundary, exit 143/130);
    a worker that died of the same signal would instead make the main process fail with
    "DataLoader worker killed" before it gets there. Workers still end with the main process:
    it shuts them down, and each watches its parent.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


_PERSISTENT = weakref.WeakSet()  # loaders whose workers outlive their iterations


_WORKERS = weakref.WeakSet()  # every worker process our loaders started


class WorkerTrackingLoader(DataLoader):
    """A DataLoader that records the worker processes of each iterator it starts, so that the
    exit handler below can find them (multiprocessing drops a process's target once started).

    ``transport``: how workers hand batches over; ``ring`` (batch_ring.py) sends their tensors
    through shared memory that is reused, where DataLoader's own way (``torch``) makes a fresh
    segment for each tensor. Without workers both are the same."""

    def __init__(self, *args, transport="ring", **kwargs):
        use_ring = transport == "ring" and kwargs.get("num_workers", 0) > 0
        if use_ring:
            kwargs["collate_fn"] = RingCollate(kwargs.get("collate_fn") or default_collate)
        super().__init__(*args, **kwargs)
        self._ring = None

    def __iter__(self):
        iterator = super().__iter__()
        if self.num_workers == 0:
            return iterator
        return _Batches(iterator, isinstance(self.collate_fn, RingCollate))

    def _start_ring(self):
        """A fresh ring for the workers about to start (forked ones only: they inherit it)."""
        ctx = self.multiprocessing_context or multiprocessing.get_context()
        if ctx.get_start_method() != "fork":
            self._ring = self.collate_fn.ring = None
            return
        slots = (self.prefetch_factor or 2) + 1  # what a worker has in flight, and one being filled
        try:
            self._ring = BatchRing(self.num_workers, slots, ctx)
        except (OSError, ValueError, ImportError):  # no shared memory or semaphores here: DataLoader's way
            self._ring = None
        self.collate_fn.ring = self._ring

    def _get_iterator(self):
        if isinstance(self.collate_fn, RingCollate):
            self._start_ring()
        # Workers are forked with SIGTERM/SIGINT blocked, so a group signal landing before their
        # worker_init_fn ignores it cannot kill them (the main process gets it once unblocked).
        # Children are recorded even when starting raises, so the exit handler finds them all.
        before = set(multiprocessing.active_children())
        blocked = {signal.SIGTERM, signal.SIGINT}
        masked = self.num_workers > 0 and hasattr(signal, "pthread_sigmask")
        if masked:
            signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            iterator = super()._get_iterator()
            # the ring lives as long as the iterator whose workers write it (a second iterator
            # of the same loader gets a ring of its own)
            iterator._batch_ring = self._ring
            record_workers(iterator)  # a worker's death names its worker id (worker_death.py)
            return iterator
        finally:
            _WORKERS.update(set(multiprocessing.active_children()) - before)
            if masked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)


class _Batches:
    """A worker-fed DataLoader iterator as the trainer reads it: a worker's DataError raised as
    the one line it was (sample_errors.py), not torch's text with the worker's traceback, and a
    worker's death as :class:`~up_trainer.data.worker_death.WorkerDied`; and with the ring (``unpacking``), each batch's descriptors copied out as it is handed on."""

    def __init__(self, iterator, unpacking):
        self._iterator = iterator
        self._unpacking = unpacking

    def __iter__(self):
        return self

    def __next__(self):
        try:
            batch = next(self._iterator)
        except DataError as exc:
            raised = worker_error_as_raised(exc)
            if raised is None:
                raise
            end_workers_of(self._iterator)
            raise raised from None
        except RuntimeError as exc:  # torch's text for a worker that died, as one line (worker_death.py)
            died = worker_death(exc)
            if died is None:
                raise
            end_workers_of(self._iterator)
            raise died from None
        return unpack(batch) if self._unpacking else batch

    def __len__(self):
        return len(self._iterator)


@atexit.register
def _end_loader_workers():
    end_loader_workers()


def end_loader_workers():
    """End every DataLoader worker before multiprocessing's own exit handler (registered
    earlier, so it runs later) does. That handler terminates daemon children with SIGTERM,
    which our workers ignore (:func:`ignore_stop_signals`), and then joins them without a
    timeout: any worker still alive at exit would hang the interpreter forever. Workers are
    alive at exit when their loader is persistent, or when a run ended (an interrupt, an
    error) while an iterator was still referenced from a traceback.

    Persistent loaders are shut down the polite way first; whatever remains is killed, which
    is safe: a worker holds nothing but batches nobody will read. The Python API calls this
    too when a run returns (api/isolation.py): no worker outlives the call.
    """
    for loader in list(_PERSISTENT):
        iterator = getattr(loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
    alive = [process for process in list(_WORKERS) if process.is_alive()]
    if alive and hasattr(signal, "SIGCHLD"):
        # torch's SIGCHLD handler would raise "DataLoader worker is killed" at the first one
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for process in alive:
        process.kill()
    for process in alive:
        process.join(timeout=5)


def end_workers_of(iterator):
    """End the workers of an iterator that failed, at once. Torch's own shutdown asks them to
    stop and waits up to 5 s for each, then sends SIGTERM, which they ignore
    (:func:`ignore_stop_signals`): a worker busy with a batch nobody will read, or waiting for a
    ring slot, held the failed run's caller for tens of seconds. They hold nothing else."""
    from torch.utils.data._utils import signal_handling

    workers = getattr(iterator, "_workers", None) or []
    if getattr(iterator, "_worker_pids_set", False):  # so torch's SIGCHLD handler ignores these deaths
        signal_handling._remove_worker_pids(id(iterator))
        iterator._worker_pids_set = False
    for process in workers:
        if process.is_alive():
            process.kill()
    for process in workers:
        process.join(timeout=5)
    if hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()


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

    def __init__(self, ds_cfg, train_set, test_set, seed, rank=0, world_size=1):
        self.cfg = ds_cfg
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
        self.epochs = None  # the run's epoch count (set by the builder): persistent_workers null needs it

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
            return self.cfg["num_workers"] > 0 and (self.epochs or 1) > 1
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
            # Workers inherit what the main process set up before they start (the image cache's
            # arena, the batch ring, the decoder limits): fork, Linux's default until Python 3.14
            # made it forkserver, which would pickle the data set into each worker instead.
            kwargs["multiprocessing_context"] = "fork"
        return kwargs

    def _keep(self, loader):
        if self.persistent():
            _PERSISTENT.add(loader)
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
