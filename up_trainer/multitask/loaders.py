"""The loaders of a multitask run: dataset.train's loader sets the epoch, and each other
task's training data is served in step with it.

Every step takes one batch of each task. An epoch is dataset.train's batches; a task whose
data holds fewer batches starts over (a new shuffle) when it runs out, one holding more is
cut off at its step count, as UP's runner does (it re-creates an exhausted iterator). Where a
task's loader stands is a function of the run's position alone (global step p: pass p // n,
batch p % n of a task with n batches per pass), so a resumed run continues every task's data
exactly where it stopped, with nothing extra in the checkpoint.
"""
from ..data.loader import LoaderFactory
from ..data.task_batches import TaskBatches


class TaskData:
    """One task's data: the section names, its training LoaderFactory (None when it trains on
    dataset.train) and its evaluation LoaderFactory (None when not evaluated)."""

    def __init__(self, task, train, test):
        self.task, self.train, self.test = task, train, test


def section_loader_cfg(ds_cfg, entry):
    """The loader settings of a multitask.datasets section: the run's dataset keys with the
    section's own batch size and batching keys (no batch mixing, no repeat factors)."""
    cfg = dict(ds_cfg, batch_fn=None, repeat_factor=None, aspect_ratio_groups=None, drop_last=False,
               alignment=1, pad_value=0)
    for key in ("batch_size", "drop_last", "aspect_ratio_groups", "alignment", "pad_value"):
        if key in entry:
            cfg[key] = entry[key]
    cfg["test_batch_size"] = cfg["batch_size"]
    return cfg


class MultiTaskLoaders:
    """dataset.train / dataset.test's LoaderFactory (``main``) with the tasks' loaders beside it;
    everything the trainer and hooks ask of a LoaderFactory is the main one's, except the
    training loader, which yields :class:`TaskBatches`."""

    def __init__(self, main, task_data):
        self.__dict__["main"] = main
        self.__dict__["task_data"] = task_data

    def __getattr__(self, name):
        return getattr(self.main, name)

    def __setattr__(self, name, value):
        setattr(self.main, name, value)

    def train_loader(self, epoch, start_batch=0):
        main_loader = self.main.train_loader(epoch, start_batch=start_batch)
        step = (epoch - 1) * self.main.epoch_len() + start_batch  # steps taken before this one
        return _Steps(main_loader, self.task_data, step)


class _Steps:
    def __init__(self, main_loader, task_data, step):
        self.main_loader, self.task_data, self.step = main_loader, task_data, step

    def __iter__(self):
        streams = [None if d.train is None else _cycle(d.train, self.step) for d in self.task_data]
        for batch in self.main_loader:
            yield TaskBatches(batch if stream is None else next(stream) for stream in streams)


def _cycle(factory, step):
    """Batches of ``factory`` from global step ``step`` on, pass after pass."""
    per_pass = factory.epoch_len()
    cycle, offset = divmod(step, per_pass)
    while True:
        yield from factory.train_loader(cycle + 1, start_batch=offset)
        cycle, offset = cycle + 1, 0


def task_factory(ds_cfg, entry, dataset, seed, dist, context, train):
    cfg = section_loader_cfg(ds_cfg, entry)
    if train:
        return LoaderFactory(cfg, dataset, None, seed, dist.rank, dist.world_size, context)
    return LoaderFactory(cfg, None, dataset, seed, dist.rank, dist.world_size, context)
