"""``dataset.cache`` / ``cache_bytes`` / ``cache_dir`` / ``cache_hash``: checked and normalized
at config time (the cache itself is data/image_cache.py)."""
import math
import re

from ..errors import ConfigError, did_you_mean, short_repr

CACHE_MODES = ("none", "ram", "disk")
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(value, path="dataset.cache_bytes"):
    """Bytes from an int or a human size ("2GB", "1.5 GiB", "500MB"); one-line error otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        match = _SIZE.match(value) if isinstance(value, str) else None
        if match is None or match.group(2).lower() not in _UNITS:
            raise ConfigError(path, f"{short_repr(value)} is not a size", "give bytes, or a number with a unit: KB, "
                              "MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. 8GB")
        number = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if number < 1:
        raise ConfigError(path, f"must be at least 1 byte, got {short_repr(value)}")
    return number


def format_size(nbytes, round_up=False):
    """'3.21 GB' (powers of 1000, as parse_size reads them); ``round_up`` gives a value of at
    least ``nbytes`` written as a config value ('3.3GB')."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if nbytes >= scale:
            break
    else:
        return f"{nbytes}B" if round_up else f"{nbytes} B"
    if round_up:
        return f"{math.ceil(nbytes / scale * 10) / 10:g}{unit}"
    return f"{nbytes / scale:.2f} {unit}"


def check_cache_keys(ds):
    """``cache: true/false`` (YOLOX's and Ultralytics' spelling) become ram/none; sizes become
    bytes; the disk-only keys next to ``cache: ram`` are refused (they would do nothing)."""
    cache = ds["cache"]
    if isinstance(cache, bool):
        cache = ds["cache"] = "ram" if cache else "none"
    if cache not in CACHE_MODES:
        raise ConfigError("dataset.cache", f"{short_repr(cache)} is not one of {', '.join(CACHE_MODES)}",
                          did_you_mean(cache, CACHE_MODES))
    if ds["cache_bytes"] is not None:
        ds["cache_bytes"] = parse_size(ds["cache_bytes"])
    if cache == "ram":
        for key in ("cache_dir", "cache_hash"):
            if ds[key] not in (None, False):
                raise ConfigError(f"dataset.{key}", "only used by dataset.cache: disk (the cache is ram)")
