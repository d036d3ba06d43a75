"""``dataset.cache: disk``: the image arena as files in ``dataset.cache_dir``, reused by later runs.

Files in the directory:

- ``images.data``: the slots' bytes, reserved in full at start-up (``posix_fallocate``), so a
  disk that fills up is a one-line error then, not a SIGBUS in a worker writing to the mapping;
- ``images.table``: one SLOT record per slot (offset, size, shape, state, CRC-32 of the bytes),
  mapped shared by every worker;
- ``images.index.json``: per slot the source file's absolute path, Pillow mode, the pipeline
  step its pixels went through (null: the decoded file), the file's size in bytes, ``mtime_ns``
  and, with ``dataset.cache_hash``, a BLAKE2b digest of its content;
- ``images.lock``: held (``fcntl.lockf``) while a run uses the directory; a second run gets a
  one-line error.

At start-up each planned image keeps its slot from an earlier run when the slot has its size
and the source file's identity (size, mtime_ns, digest) is unchanged; otherwise the slot is
emptied and refilled at the next decode; an arena written by other versions of the decoding
libraries (Pillow, torchvision) starts over. A slot filled by an earlier run is trusted only after
its CRC matches at its first read in this run (a crash or power loss may have left it half
written). Slots of images no longer planned are kept for the runs that use them, until the
budget is short: then the arena starts over with this run's images only.
"""
import errno
import fcntl
import hashlib
import json
import mmap
import os
import shutil

import numpy as np

from ..atomic import write_with
from ..errors import ConfigError
from ..config.cache_keys import format_size
from .image_arena import EMPTY, FILLED, SLOT, UNVERIFIED, ImageCache, refuse

INDEX, TABLE, DATA, LOCK = "images.index.json", "images.table", "images.data", "images.lock"
VERSION = 2
TOKEN_BYTES = 16  # the table file starts with the token its index names: the two belong together


def decoders():
    """The libraries whose code made the cached pixels: an arena made by other versions is
    started over (a new libjpeg may round differently)."""
    import PIL
    import torchvision

    return f"Pillow {PIL.__version__}, torchvision {torchvision.__version__}"


def file_digest(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=16)).hexdigest()


def source_identity(path, use_hash):
    """[size, mtime_ns, digest or None] of the source file; None when it cannot be read."""
    try:
        st = os.stat(path)
        return [st.st_size, st.st_mtime_ns, file_digest(path) if use_hash else None]
    except OSError:
        return None


def _lock(directory):
    """Hold the directory for this process (forked workers do not inherit a lockf lock)."""
    path = os.path.join(directory, LOCK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise ConfigError("dataset.cache_dir", f"{directory} is in use by another run ({holder})",
                          "give each concurrent run its own cache_dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"PID {os.getpid()}\n".encode(), 0)
    return fd


def _earlier_slots(directory):
    """{(path, mode, step): (offset, nbytes, state, shape, ndim, crc, identity)} of the arena an earlier
    run left, or {} when there is none or its files do not belong together."""
    try:
        with open(os.path.join(directory, INDEX), encoding="utf-8") as f:
            index = json.load(f)
        with open(os.path.join(directory, TABLE), "rb") as f:
            token = f.read(TOKEN_BYTES)
            table = np.frombuffer(f.read(), SLOT)
        data_size = os.path.getsize(os.path.join(directory, DATA))
    except (OSError, ValueError):
        return {}
    if not isinstance(index, dict) or index.get("version") != VERSION or index.get("token") != token.hex() \
            or index.get("decoders") != decoders() or not isinstance(index.get("entries"), list) \
            or len(index["entries"]) != len(table) or not all(map(_is_entry, index["entries"])):
        return {}
    slots = {}
    for (path, mode, step, *identity), row in zip(index["entries"], table):
        offset, nbytes = int(row["offset"]), int(row["nbytes"])
        state = int(row["state"]) if offset + nbytes <= data_size else EMPTY
        slots[(path, mode, step)] = (offset, nbytes, state, row["shape"].copy(), int(row["ndim"]), int(row["crc"]),
                               identity)
    return slots


def _is_entry(entry):
    """Whether ``entry`` has the shape :func:`_layout` writes: [path, mode, step, size, mtime_ns,
    digest]. The index is read back like the table: a file edited, truncated or written by
    something else is one more reason to start over, never an error."""
    if not isinstance(entry, list) or len(entry) != 6:
        return False
    path, mode, step, size, mtime_ns, digest = entry
    ints = all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (size, mtime_ns))
    return isinstance(path, str) and isinstance(mode, str) and (step is None or isinstance(step, str)) and ints \
        and (digest is None or isinstance(digest, str))


def _layout(images, earlier, use_hash, budget):
    """(rows, index entries, data size, images kept from the earlier run) of the new arena."""
    rows, entries, kept = [], [], 0
    end = max((offset + nbytes for offset, nbytes, *_ in earlier.values()), default=0)
    planned = set()
    for path, mode, step, nbytes in images:
        key = (os.path.abspath(path), mode, step)
        planned.add(key)
        identity = source_identity(path, use_hash)
        old = earlier.get(key)
        if old is not None and old[1] == nbytes:
            offset, _, state, shape, ndim, crc, old_identity = old
            intact = identity is not None and old_identity == identity and state in (FILLED, UNVERIFIED)
            kept += intact
            rows.append((offset, nbytes, shape if intact else (0, 0, 0), ndim if intact else 0,
                         UNVERIFIED if intact else EMPTY, crc if intact else 0))
        else:
            rows.append((end, nbytes, (0, 0, 0), 0, EMPTY, 0))
            end += nbytes
        entries.append([*key, *(identity or [None, None, None])])
    for key, (offset, nbytes, state, shape, ndim, crc, identity) in earlier.items():
        if key not in planned:  # another data set's images: kept for the runs that read them
            rows.append((offset, nbytes, shape, ndim, UNVERIFIED if state in (FILLED, UNVERIFIED) else EMPTY, crc))
            entries.append([*key, *identity])
    if budget is not None and end > budget:  # start over with this run's images only
        offsets = np.cumsum([0] + [n for *_, n in images])
        rows = [(int(o), n, (0, 0, 0), 0, EMPTY, 0) for o, (*_, n) in zip(offsets[:-1], images)]
        entries, end, kept = entries[:len(images)], int(offsets[-1]), 0
    return rows, entries, end, kept


def _write_atomically(path, payload):
    write_with(path, lambda f: f.write(payload))


def open_disk_cache(directory, images, need, budget, use_hash, what):
    """The disk arena for ``images`` in ``directory`` (created), holding the directory's lock."""
    if budget is not None and need > budget:
        refuse("dataset.cache_bytes", what, need, f"dataset.cache_bytes is {format_size(budget)}",
               f"set it to at least {format_size(need, True)}")
    try:
        os.makedirs(directory, exist_ok=True)
        lock_fd = _lock(directory)
    except OSError as exc:
        raise ConfigError("dataset.cache_dir", f"cannot use {directory}: {exc.strerror}") from None
    try:
        rows, entries, end, kept = _layout(images, _earlier_slots(directory), use_hash, budget)
        data_path = os.path.join(directory, DATA)
        held = os.path.getsize(data_path) if os.path.exists(data_path) else 0
        free = shutil.disk_usage(directory).free
        if end - held > free:
            refuse("dataset.cache_dir", what, need, f"{directory} has {format_size(free)} free",
                   "free some space, give another cache_dir, or use dataset.cache: ram")
        table = np.array(rows, dtype=SLOT)
        token = os.urandom(TOKEN_BYTES)
        _write_atomically(os.path.join(directory, TABLE), token + table.tobytes())
        _write_atomically(os.path.join(directory, INDEX), json.dumps(
            {"version": VERSION, "token": token.hex(), "decoders": decoders(), "entries": entries}).encode())
        data = _map_data(data_path, end)
        table = np.memmap(os.path.join(directory, TABLE), dtype=SLOT, mode="r+", offset=TOKEN_BYTES,
                          shape=(len(rows),))
    except BaseException:
        os.close(lock_fd)
        raise
    cache = ImageCache("disk", images, table[:len(images)], data, verify=True, closer=lambda: os.close(lock_fd))
    return cache


def _map_data(path, size):
    """The data file mapped shared, ``size`` bytes reserved on disk (None when empty)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)  # a fresh layout: give back what the old one held
        if size == 0:
            return None
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise ConfigError("dataset.cache_dir", f"no space left for the {format_size(size)} image cache in "
                              f"{os.path.dirname(path)}") from None
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
