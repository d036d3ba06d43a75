"""Every file a run writes besides its checkpoints (metrics.csv/.jsonl, event files, plots,
evaluation results) is written through here, so a write that fails fails one way.

- A new version of a file is written next to it under a temp name and moved over it
  (:func:`replacing`, over :mod:`up_trainer.atomic`, the one atomic write every writer uses):
  a reader never sees half a file, and when the write fails the temp file is removed,
  whatever the writer (csv, matplotlib, an evaluator) was doing.
- An append (:func:`appending`) that fails is cut back to where it started: no half row.
- Any OSError in such a write (a full disk, a quota, a read-only remount) becomes one
  :class:`RunFileError` naming the file: a user error (exit 2, one line), not a traceback.

The trainer treats a RunFileError (and a disk-full OSError from a writer that does not use
this module) like any failure inside training: the hooks' on_exception runs first, so
auto_checkpoint writes the snapshot to save_dir (often another, healthy disk), then the run
ends with the one line, which says where the newest checkpoint is.
"""
import contextlib
import errno
import os

from .. import atomic
from ..errors import UserError

# errnos that say "this storage takes no more writes": the user's to fix, not a bug.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


class RunFileError(UserError):
    """A run file (metrics, event files, plots, results) could not be written. ``note``: what
    the run did about it (where its newest checkpoint is), added by the trainer."""

    def __init__(self, path, cause, note=None):
        self.path = path
        self.reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
        super().__init__(f"cannot write {path}: {self.reason}" + (f"; {note}" if note else ""))

    def noted(self, note):
        return RunFileError(self.path, self.reason, note)


def storage_error(exc):
    """The RunFileError for ``exc`` when it is one, or an OSError that says the storage is
    full or refuses writes (from any writer); None for anything else."""
    if isinstance(exc, RunFileError):
        return exc
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        return RunFileError(exc.filename or "a run file", exc)
    return None


@contextlib.contextmanager
def replacing(path):
    """Yield a temp path to write the new version of ``path`` to; on success it replaces
    ``path`` atomically (:mod:`up_trainer.atomic`: synced, renamed, directory synced). On any
    failure the temp file is gone and an OSError is a RunFileError."""
    try:
        with atomic.replacing(path) as tmp:
            yield tmp
    except OSError as exc:
        raise RunFileError(path, exc) from None


def write_text(path, text):
    """``path`` holds ``text`` afterwards, or, when the write fails, what it held before."""
    try:
        atomic.write_text(path, text)
    except OSError as exc:
        raise RunFileError(path, exc) from None


@contextlib.contextmanager
def appending(path):
    """An append-mode text file for the block; when a write (or the close) fails, the file is
    cut back to its size before the block and the OSError is a RunFileError."""
    try:
        f = open(path, "a", newline="", encoding="utf-8")
    except OSError as exc:
        raise RunFileError(path, exc) from None
    start = f.tell()
    try:
        with f:
            yield f
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.truncate(path, start)
        raise RunFileError(path, exc) from None


@contextlib.contextmanager
def writing(path):
    """For writes this module cannot wrap (a client library's own file): an OSError in the
    block is a RunFileError naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise RunFileError(path, exc) from None
