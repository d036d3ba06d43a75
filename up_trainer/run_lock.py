"""One `up train` per directory: an exclusive lock on ``<dir>/.up.lock`` in every directory a
run writes (the run dir, saver.save_dir, saver.results_dir, each hook's output folders such as
the logger's logdir: ``RunPaths.written``, run_paths.py).

Two runs writing one directory would interleave metrics.csv, train.log and event files, and
overwrite each other's checkpoints, and both exit 0. Locking only the run dir is not enough:
two runs in different work dirs may share an absolute ``saver.save_dir`` or logdir.

Each lock is a POSIX record lock (``fcntl.lockf``): the kernel drops it when its process dies,
however it dies, so a lock is never stale in the kernel's eyes; it works on NFS, and a forked
child (a DataLoader worker) does not inherit it. The file holds the holder's PID and host for
the message the next run prints; a clean exit empties it, so text found by a new holder means
the previous one died holding it (its lock is then simply taken over).

The directories are locked in one fixed order (by real path) and never waited for: a run
that finds one held releases those it took and stops. So two runs can never deadlock, and of
two runs that share several directories the one that takes the first shared one proceeds.
"""
import contextlib
import datetime
import fcntl
import logging
import os
import socket

from .errors import UserError

LOCK_NAME = ".up.lock"
log = logging.getLogger("up")

# What the run-dir message tells the user to change, by the key that named the directory.
_CHANGE = {"run dir": "--work-dir"}


def _holder_text(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 512).decode("utf-8", "replace").strip()


def lock_order(dirs):
    """``dirs`` without repeats (one directory named twice, or through a symlink, is locked
    once, under its first name), ordered by real path: the order every run locks in."""
    seen = {}
    for what, path in dirs:
        seen.setdefault(os.path.realpath(path), (what, path))
    return [seen[real] for real in sorted(seen)]


@contextlib.contextmanager
def _hold(what, path):
    """Hold one directory's lock for the block; yields the text a dead previous holder left
    (None when there was none). A held lock: UserError naming the directory and its holder."""
    try:
        os.makedirs(path, exist_ok=True)
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UserError(f"cannot lock the {what} {path}: {exc.strerror or exc}: "
                        f"{os.path.join(path, LOCK_NAME)}") from None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder_text(fd) or "another process"
            raise UserError(f"{what} {path} is in use by another up train: {holder} "
                            f"(wait for it to end, or give another {_CHANGE.get(what, what)})") from None
        stale = _holder_text(fd) or None
        started = datetime.datetime.now().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"PID {os.getpid()} on host {socket.gethostname()} since {started}\n".encode())
        os.fsync(fd)
        try:
            yield stale
        finally:
            os.ftruncate(fd, 0)  # released cleanly: the next holder finds it empty
    finally:
        os.close(fd)  # closing drops the lock


@contextlib.contextmanager
def hold_dirs(dirs):
    """Hold the lock of every ``(what, path)`` in ``dirs`` for the block, taken in
    :func:`lock_order`; yields ``[(what, path, previous holder)]`` for each lock taken over
    from a run that died holding it. One held lock: UserError, and none is kept."""
    with contextlib.ExitStack() as stack:
        stale = []
        for what, path in lock_order(dirs):
            previous = stack.enter_context(_hold(what, path))
            if previous:
                stale.append((what, path, previous))
        yield stale

