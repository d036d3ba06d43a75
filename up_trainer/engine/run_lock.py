"""One `up train` per run dir: an exclusive lock on ``<run dir>/.up.lock``.

Two runs in one directory would interleave metrics.csv, train.log and checkpoints and both
exit 0. The lock is a POSIX record lock (``fcntl.lockf``): the kernel drops it when its process
dies, however it dies, so a lock is never stale in the kernel's eyes; it works on NFS, and a
forked child (a DataLoader worker) does not inherit it. The file holds the holder's PID and
host for the message the next run prints; a clean exit empties it, so text found by a new
holder means the previous one died holding it (its lock is then simply taken over).
"""
import contextlib
import datetime
import fcntl
import logging
import os
import socket

from ..errors import UserError

LOCK_NAME = ".up.lock"
log = logging.getLogger("up")


def _holder_text(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 512).decode("utf-8", "replace").strip()


@contextlib.contextmanager
def hold_run_dir(run_dir):
    """Hold the run dir's lock for the block; yields the description of a dead previous
    holder whose lock was taken over (None when there was none). A held lock: UserError."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UserError(f"cannot lock the run dir {run_dir}: {exc.strerror}: {path}") from None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder_text(fd) or "another process"
            raise UserError(f"run dir {run_dir} is in use by another up train: {holder} "
                            f"(wait for it to end, or give another --work-dir)") from None
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
