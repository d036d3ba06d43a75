"""``dataset.cache``: decoded images kept once for every DataLoader worker (none | ram | disk).

Decoding a JPEG costs more than most of a detection pipeline's transforms, and a plain dict
filled inside DataLoader workers would hold one copy per worker and start empty again in every
epoch's fresh workers. The cache is instead one arena planned in the main process before any
worker starts:

- **plan**: every image file the training and test sets decode (``dataset.image_files()``:
  path, Pillow mode, and the size when the annotations give it, else read from the file's
  header) gets a slot of exactly its decoded size, height x width x channels bytes. Their sum
  is checked against the budget (``dataset.cache_bytes``) at start-up: a budget that cannot
  hold the data set is one line saying how much it needs, never an out-of-memory kill later.
- **arena**: ``ram`` is one anonymous shared mapping (MAP_SHARED: forked workers see the very
  same pages, and /dev/shm's size limit does not apply); ``disk`` maps files in
  ``dataset.cache_dir`` that later runs reuse (image_cache_disk.py).
- **first step**: a detection data set whose pipeline starts with a deterministic step (a
  fixed resize) lists what that step makes of each image instead (tasks/det/first_step.py), so
  its later epochs skip the decode and the step.
- **fill**: lazily. The first time an image is decoded, in whichever process, its bytes are
  copied into its slot; from then on every process copies them out instead of decoding. The
  first epoch costs what it costs uncached plus one copy per image; later epochs decode nothing.

Slot states change under one lock that the forked workers share (microseconds per image), so
no process sees a slot marked filled before its bytes are in place. Two workers filling the
same slot at once write identical bytes. The cache sits under ``readers.decode_image`` (the
reading data set's DataContext holds it), so pixels are exactly the decoder's: a hit returns a
copy of the array the decode returned.
"""
import logging
import mmap
import os
import time

import numpy as np

from ..config.cache_keys import format_size
from .image_arena import SLOT, ImageCache, refuse

log = logging.getLogger("up")

RAM_SHARE = 0.6  # default ram budget: this share of the memory available at start-up


# -- plan --------------------------------------------------------------------------------------
def header_size(path):
    """(height, width) from the image's header (no pixel decoded); None when unreadable (its
    decode will report the problem in the dataset's own words)."""
    from PIL import Image

    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        with Image.open(path) as img:
            return img.height, img.width
    except Exception:
        return None
    finally:
        Image.MAX_IMAGE_PIXELS = limit


def planned_images(datasets):
    """([(path, Pillow mode, step, bytes)] of every distinct image the datasets read, names of
    the datasets that list no image files). ``datasets``: (config path, dataset) pairs.

    A dataset's ``image_files()`` lists (path, Pillow mode, (height, width) or None) per decoded
    image, or (path, mode, (channels, height, width), step) for what a deterministic first
    pipeline step makes of it (``step`` names that step; the dataset stores and reads those)."""
    from PIL import Image

    seen, images, unlisted = set(), [], []
    for name, dataset in datasets:
        files = dataset.image_files() if hasattr(dataset, "image_files") else []
        if not files:
            unlisted.append(name)
        for path, mode, size, *step in files:
            key = (path, mode, step[0] if step else None)
            if key in seen:
                continue
            seen.add(key)
            if step:
                images.append((*key, int(np.prod(size))))
                continue
            size = size or header_size(path)
            if size is not None:
                images.append((*key, int(size[0]) * int(size[1]) * Image.getmodebands(mode)))
    return images, unlisted


def available_memory():
    """Bytes this process may still allocate: MemAvailable, lowered by a cgroup (container) limit."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read())
        if limit != "max":
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available


def ram_cache(images):
    """An arena in anonymous shared memory: freed with the last process that maps it."""
    table = np.frombuffer(mmap.mmap(-1, max(len(images), 1) * SLOT.itemsize), SLOT)[:len(images)]
    offsets = np.cumsum([0] + [n for *_, n in images])
    table["offset"], table["nbytes"] = offsets[:-1], [n for *_, n in images]
    data = mmap.mmap(-1, int(offsets[-1])) if offsets[-1] else None
    return ImageCache("ram", images, table, data)


# -- the run's cache -------------------------------------------------------------------------------
def open_image_cache(ds_cfg, datasets, cache_dir=None, rank=0, world_size=1):
    """The run's cache from ``dataset.cache`` / ``cache_bytes`` / ``cache_hash``, or None for
    ``cache: none``. The builder attaches it to the run's DataContext (data/context.py) before
    any loader starts, and the data sets read through it; forked workers inherit it with them.
    It is closed by :meth:`ImageCache.close`, or when the last reference to it goes.

    ``datasets``: (config path, dataset) pairs; ``cache_dir``: the resolved disk directory.
    Each process of a distributed run keeps its own arena (a disk one under rank<N>/)."""
    mode = ds_cfg.get("cache", "none")
    if mode == "none":
        return None
    started = time.perf_counter()
    images, unlisted = planned_images([(n, d) for n, d in datasets if d is not None])
    for name in unlisted:
        log.info("dataset.cache: %s lists no image file the cache can hold (generated or in-memory data, or "
                 "exif_transpose: false)", name)
    if not images:
        return None
    need = sum(n for *_, n in images)
    names = " and ".join(n for n, d in datasets if d is not None and n not in unlisted)
    what = f"the {len(images)} image{'s' if len(images) != 1 else ''} of {names}"
    budget = ds_cfg.get("cache_bytes")
    if mode == "ram":
        # the processes of a distributed run on this machine start together, each with its own cache
        local = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1), 1)
        available = available_memory() // local
        share = f" per process ({local} on this machine)" if local > 1 else ""
        if budget is not None and need > budget:
            refuse("dataset.cache_bytes", what, need, f"dataset.cache_bytes is {format_size(budget)}",
                   f"set it to at least {format_size(need, True)}, or use dataset.cache: disk")
        if need > available:
            refuse("dataset.cache", what, need, f"only {format_size(available)} of memory is available{share}",
                   "use dataset.cache: disk, or none")
        if budget is None and need > RAM_SHARE * available:
            refuse("dataset.cache_bytes", what, need, f"the default budget is {RAM_SHARE:.0%} of the "
                   f"{format_size(available)} of memory available{share}", f"set dataset.cache_bytes: "
                   f"{format_size(need, True)} to allow more, or use dataset.cache: disk")
        cache = ram_cache(images)
        budget_text = format_size(budget) if budget is not None else f"{RAM_SHARE:.0%} of available memory"
    else:
        from .image_cache_disk import open_disk_cache

        if world_size > 1:
            cache_dir = os.path.join(cache_dir, f"rank{rank}")
        cache = open_disk_cache(cache_dir, images, need, budget, ds_cfg.get("cache_hash", False), what)
        budget_text = format_size(budget) if budget is not None else "the free disk space"
    resized = sum(step is not None for _, _, step, _ in images)
    log.info("dataset.cache %s: %d images, %s decoded (budget %s), planned in %.2f s%s%s; images are cached as they "
             "are first decoded", mode, len(images), format_size(need), budget_text, time.perf_counter() - started,
             f", {cache.filled()} already cached in {cache_dir}" if mode == "disk" else "",
             f"; {resized} of them after their pipeline's deterministic first step" if resized else "")
    return cache
