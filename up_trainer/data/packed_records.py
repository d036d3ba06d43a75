"""A data set's records packed into one byte buffer, so that loader workers share them.

A list of record dicts is millions of Python objects at COCO size. A forked DataLoader worker
shares them with the main process only until it touches them: every read of a record updates
its objects' reference counts, which writes the memory page each object lives on, and the
kernel then copies that page into the worker. After one pass over the data every worker holds
its own copy of the whole index (about 300 MB per worker for COCO's boxes).

:class:`PackedRecords` keeps each record pickled, one after the other, in a single numpy byte
array with an offsets array beside it (as detectron2's serialized data set list and MMEngine's
``serialize_data`` do): two Python objects whatever the size, whose data pages are only ever
read. ``records[i]`` unpickles a fresh copy of record ``i`` (about 10 us for a COCO image's
record), so a caller may change what it gets without changing the data set.

The data sets read their files into plain lists and are packed once built for training
(:func:`up_trainer.engine.builder.build_dataset` calls :meth:`PackedIndex.pack_records`); tools
that edit records as they go (``up data convert``, ``up data check``) keep the lists.
"""
import contextlib
import gc
import operator
import pickle
from collections.abc import Sequence

import numpy as np


class PackedRecords(Sequence):
    """A read-only sequence of records stored pickled in one uint8 array."""

    def __init__(self, records):
        blobs = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in records]
        self._offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in blobs], out=self._offsets[1:])
        self._buffer = np.frombuffer(b"".join(blobs), dtype=np.uint8)

    def __len__(self):
        return len(self._offsets) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = operator.index(index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record index {index} out of range for {n} records")
        start, end = self._offsets[i], self._offsets[i + 1]
        return pickle.loads(self._buffer[start:end].data)

    def __iter__(self):  # one pass without the bounds checks of __getitem__
        view, offsets = self._buffer.data, self._offsets.tolist()
        for start, end in zip(offsets[:-1], offsets[1:]):
            yield pickle.loads(view[start:end])

    @property
    def nbytes(self):
        """Bytes held by the packed records (buffer and offsets)."""
        return self._buffer.nbytes + self._offsets.nbytes

    def __repr__(self):
        return f"PackedRecords({len(self)} records, {self.nbytes / 2**20:.1f} MiB)"


class PackedIndex:
    """A data set whose ``records`` list can be packed once it is complete."""

    records: Sequence

    def replace_records(self, records):
        """Swap in rewritten records (a list), packed again when the old ones were: packed
        records hand out copies, so a record changed in place would change nothing."""
        self.records = PackedRecords(records) if isinstance(self.records, PackedRecords) else list(records)

    def pack_records(self):
        """Replaces ``self.records`` by its :class:`PackedRecords`: from here on the records are
        read-only (each read returns a copy)."""
        if not isinstance(self.records, PackedRecords):
            self.records = PackedRecords(self.records)


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while an index is read: reading a large JSON file
    creates millions of containers, each allocation burst triggers a collection that walks all
    of them again (a third of a COCO-sized load), and none of them is garbage."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
