"""The one way a file is replaced: written whole under a temp name, then swapped in.

Every writer of a finished file (checkpoints, metrics.csv rewrites, config.yaml, evaluation
results, predictions.jsonl, export sidecars, data reports, plots) goes through
:func:`replacing`: the new content is written to a hidden temp file in the same directory
(``os.replace`` is atomic only within one file system), flushed and fsynced, moved over the
final name with ``os.replace``, and the directory is fsynced so the rename itself survives a
power cut. A reader (``up plot`` on a live run, a resume after SIGKILL) sees the old file or
the new one, never half of one; a write that fails leaves the old file and no temp file.

What a failure means to the user (a checkpoint error, a run-file error) is the caller's to
say: the exception leaves here unchanged.
"""
import contextlib
import os


def temp_name(path):
    """A hidden name next to ``path`` that keeps its extension (matplotlib and some result
    writers choose the format by it): ``dir/.results.tmp1234.png``."""
    folder, base = os.path.split(path)
    stem, ext = os.path.splitext(base)
    return os.path.join(folder, f".{stem}.tmp{os.getpid()}{ext}")


def fsync_dir(path):
    """Make a rename inside ``path`` durable (best effort: some file systems refuse it)."""
    try:
        fd = os.open(path or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path, tmp=None):
    """Yield a temp path (``tmp``, else :func:`temp_name`) to write the new ``path`` to, by
    any writer that takes a path; when the block ends, the temp file is synced and renamed
    over ``path`` and the directory synced. On any failure the temp file is removed."""
    tmp = tmp or temp_name(path)
    try:
        yield tmp
        _fsync_file(tmp)  # the data on disk before the name points at it
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(path))


@contextlib.contextmanager
def opened(path, mode="w", tmp=None, **open_kwargs):
    """A file object for the new ``path`` (text mode: UTF-8 unless told); it replaces
    ``path`` once the block ends and the file is closed."""
    if "b" not in mode:
        open_kwargs.setdefault("encoding", "utf-8")
    with replacing(path, tmp) as name, open(name, mode, **open_kwargs) as f:
        yield f


def write_with(path, write, mode="wb", tmp=None, **open_kwargs):
    """``path`` holds what ``write(fileobj)`` writes (the file opened with ``mode``)."""
    with opened(path, mode, tmp, **open_kwargs) as f:
        write(f)


def write_text(path, text):
    """``path`` holds ``text`` (UTF-8, newlines as given)."""
    write_with(path, lambda f: f.write(text), "w", newline="")


def write_json(path, obj, **dump_kwargs):
    """``path`` holds ``obj`` as JSON."""
    import json

    write_with(path, lambda f: json.dump(obj, f, **dump_kwargs), "w")
