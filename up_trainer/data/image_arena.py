"""The image cache's arena: slots of decoded images in memory that every DataLoader worker
shares (an anonymous shared mapping, or a file mapped shared), and the one-line refusal when a
data set does not fit. Planned and installed by image_cache.py; the disk form is
image_cache_disk.py."""
import multiprocessing
import weakref
import zlib

import numpy as np

from ..config.cache_keys import format_size
from ..errors import ConfigError

# Slot states. UNVERIFIED: filled by an earlier run (disk); its CRC is checked at its first read.
EMPTY, FILLED, UNVERIFIED, UNCACHEABLE = 0, 1, 2, 3
SLOT = np.dtype([("offset", "<i8"), ("nbytes", "<i8"), ("shape", "<i4", (3,)), ("ndim", "i1"), ("state", "i1"),
                 ("crc", "<u4")])


def refuse(path, what, need, limit, hint):
    """The one-line start-up refusal: what the data set needs against what the budget allows."""
    raise ConfigError(path, f"{what} need {format_size(need)} decoded; {limit}", hint)


class ImageCache:
    """Slots of decoded images in one shared arena (how they fill: image_cache.py's docstring).

    ``images``: the plan, one (path, mode, step, nbytes) per slot in table order; ``table``: a SLOT
    array in shared memory; ``data``: the mapping holding the bytes; ``verify``: record a CRC
    at each fill (a disk arena outlives the run, and a crash may leave a slot half written)."""

    created = 0  # arenas created in this process (a test checks that workers create none)

    def __init__(self, mode, images, table, data, verify=False, closer=None):
        ImageCache.created += 1
        self.mode = mode
        self._slots = {(path, pil_mode, step): i for i, (path, pil_mode, step, _) in enumerate(images)}
        self.steps = {step for _, _, step, _ in images if step is not None}
        self._table = table
        self._data = data
        self._bytes = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
        self._lock = multiprocessing.Lock()  # forked workers inherit it with the arena
        self._verify = verify
        # run once: by close(), or when the cache is collected (a run that ends without closing it)
        self._closer = weakref.finalize(self, closer) if closer is not None else None
        self.nbytes = int(table["nbytes"].sum()) if len(table) else 0

    def __len__(self):
        return len(self._slots)

    def filled(self):
        """Slots holding their image (filled in this run or, for disk, by an earlier one)."""
        with self._lock:
            return int(np.isin(self._table["state"], (FILLED, UNVERIFIED)).sum())

    def decode(self, path, pil_mode, where, decode):
        """The image at ``path`` as ``decode(path, pil_mode, where, None)`` returns it, from its
        slot when filled; an image outside the plan is decoded every time."""
        return self.fetch(path, pil_mode, None, lambda: decode(path, pil_mode, where, None))

    def fetch(self, path, pil_mode, step, produce):
        """The uint8 array cached for (path, mode, step), else ``produce()``'s, kept in its slot;
        step None is the decoded file, else what the named first pipeline step makes of it."""
        slot = self._slots.get((path, pil_mode, step))
        if slot is None:
            return produce()
        array = self._read(slot)
        if array is None:
            array = produce()
            self._write(slot, array)
        return array

    def _read(self, slot):
        table = self._table
        with self._lock:
            state = table["state"][slot]
            if state != FILLED and state != UNVERIFIED:
                return None
            offset, nbytes, ndim = int(table["offset"][slot]), int(table["nbytes"][slot]), int(table["ndim"][slot])
            shape, crc = tuple(int(d) for d in table["shape"][slot][:ndim]), int(table["crc"][slot])
        array = self._bytes[offset:offset + nbytes].copy()
        if state == UNVERIFIED:
            intact = zlib.crc32(array) == crc
            with self._lock:
                if table["state"][slot] == UNVERIFIED:
                    table["state"][slot] = FILLED if intact else EMPTY
            if not intact:
                return None
        return array.reshape(shape)

    def _write(self, slot, array):
        table = self._table
        if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim not in (2, 3) \
                or array.nbytes != table["nbytes"][slot]:
            with self._lock:  # not what the plan sized (wrong size in the annotations): decoded each time
                table["state"][slot] = UNCACHEABLE
            return
        array = np.ascontiguousarray(array)
        offset = int(table["offset"][slot])
        self._bytes[offset:offset + array.nbytes] = array.reshape(-1)
        crc = zlib.crc32(array) if self._verify else 0
        with self._lock:
            table["shape"][slot, :array.ndim] = array.shape
            table["ndim"][slot], table["crc"][slot] = array.ndim, crc
            table["state"][slot] = FILLED

    def close(self):
        """Drop this process's references to the arena (its memory goes with the last one)."""
        self._bytes = self._table = self._data = None
        self._slots = {}
        if self._closer is not None:
            self._closer()  # a finalize: calling it again does nothing
            self._closer = None
