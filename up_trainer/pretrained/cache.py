"""A published weights file on this machine: found in torch.hub's cache and verified, or
downloaded there (a progress bar on stderr, then verified), or refused in one line that names
the URL and the exact path to put the file at.

Verification. A torchvision file's name carries the first hex digits of its sha256: the file
is hashed and compared, in the cache as after a download (torch.hub checks only downloads).
YOLOX's release publishes no hash and no size: what can be checked is that the file is a
complete zip archive as torch.save writes it, every member's CRC32 intact (a truncated or
altered download fails), and, when it is loaded, which tensors fit (the load report).
"""
import hashlib
import logging
import os
import zipfile

from ..errors import ConfigError

log = logging.getLogger("up")
OFFLINE_ENV = "UP_OFFLINE"  # set (not 0): never download; a missing file is refused at once
CHUNK = 1 << 20


def offline():
    return os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0")


def local_file(entry, key=None):
    """The verified local path of ``entry`` (a :class:`.catalog.WeightsFile`), downloading it
    into torch.hub's cache when it is missing and downloads are allowed."""
    path = entry.cache_path
    if os.path.isfile(path):
        verify(entry, path, key)
        return path
    if offline():
        raise _missing(entry, key, f"{OFFLINE_ENV} is set")
    download(entry, key)
    verify(entry, path, key)
    return path


def download(entry, key=None):
    """Download ``entry`` to its cache path (torch.hub: a temporary file moved in place once
    complete, the sha256 prefix checked when the name has one)."""
    import torch.hub

    path = entry.cache_path
    log.info("downloading %s (%s) to %s", entry.name, entry.url, path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.hub.download_url_to_file(entry.url, path, entry.sha256_prefix, progress=True)
    except RuntimeError as exc:  # torch.hub's hash check; the partial file is removed
        raise ConfigError(key, f"{entry.name}: the file downloaded from {entry.url} is not the published one "
                          f"({exc}); nothing was kept") from None
    except OSError as exc:  # no network, DNS, HTTP errors (URLError, HTTPError), a read-only cache
        raise _missing(entry, key, _reason(exc)) from None


def verify(entry, path, key=None):
    """Refuse (one line) a file that is not the published one, as far as it can be told."""
    if entry.sha256_prefix:
        digest = sha256_of(path)
        if not digest.startswith(entry.sha256_prefix):
            raise ConfigError(key, f"{path} is not the published {entry.name}: its sha256 starts "
                              f"{digest[:len(entry.sha256_prefix)]}, the file name says {entry.sha256_prefix}",
                              f"delete it and run: up weights fetch {entry.name}")
        return
    bad = _zip_damage(path)
    if bad:
        raise ConfigError(key, f"{path} is not a complete {entry.name} file: {bad}",
                          f"delete it and run: up weights fetch {entry.name}")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _zip_damage(path):
    """None for a complete torch.save zip archive, else what is wrong with it."""
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()  # reads every member, compares its CRC32
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        return f"not a zip archive as torch.save writes ({exc})"
    return f"member {broken} fails its CRC32 check" if broken else None


def _missing(entry, key, reason):
    return ConfigError(key, f"{entry.name} is not on this machine and cannot be downloaded ({reason}): "
                       f"download {entry.url} and put it at {entry.cache_path}")


def _reason(exc):
    reason = getattr(exc, "reason", None) or exc.strerror or exc
    return str(reason).strip().splitlines()[0] if str(reason).strip() else type(exc).__name__
