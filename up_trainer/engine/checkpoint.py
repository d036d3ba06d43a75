"""Checkpoint files: names, atomic writes, the latest pointer and discovery (loading and
validation: checkpoint_load.py).

Every file is written to a temporary name in the same directory, flushed and fsynced, moved
over the final name with os.replace, and the directory is fsynced; a final name never holds a
partial file. Extra names for the same state (ckpt_latest.pth, ckpt_best.pth) are hard links
(a copy where the filesystem has none), swapped in with os.replace too, so they never dangle.
"""
import contextlib
import copy
import io
import logging
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import torch

from ..atomic import replacing, write_with
from ..errors import CheckpointError
from ..integrity import verify_checksums  # noqa: F401  (importable from here: benchmarks/checkpoint.py)
from .checkpoint_load import load_checkpoint, position_of, recorded_position
from .checkpoint_signals import stop_signals_held
from ..weights import load_weights  # noqa: F401  (importable from here before)

log = logging.getLogger("up")

LATEST = "ckpt_latest.pth"
BEST = "ckpt_best.pth"
FORMAT = "up-trainer/1"
_NAME_RE = re.compile(r"^ckpt_e(\d+)(?:-i(\d+))?\.pth$")
_TMP_RE = re.compile(r"^\.ckpt_.*\.pth\.tmp(\d+)$")


def _pid_alive(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def epoch_name(epoch):
    return f"ckpt_e{epoch}.pth"


def interrupt_name(epoch, iteration):
    return f"ckpt_e{epoch}-i{iteration}.pth"


def parse_name(name):
    """(epoch, iter or None) for ckpt_e{e}.pth / ckpt_e{e}-i{i}.pth, else None."""
    m = _NAME_RE.match(name)
    if not m:
        return None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) else None)


def _tmp_path(final):
    d, base = os.path.split(final)
    return os.path.join(d, f".{base}.tmp{os.getpid()}")


def atomic_write_bytes(final, write):
    """Call ``write(fileobj)`` on a temp file next to ``final`` and swap it in atomically
    (:mod:`up_trainer.atomic`); a failed write is one CheckpointError naming the file."""
    try:
        write_with(final, write, "wb", tmp=_tmp_path(final))
    except BaseException as exc:
        cause = _os_error_in(exc)
        if cause is not None:
            raise CheckpointError(f"cannot write checkpoint {final}: {cause.strerror or cause}; "
                                  "the checkpoints written before it are intact") from None
        raise


def _os_error_in(exc):
    """The OSError behind ``exc``: itself, or the one torch's zip writer turned into a
    RuntimeError ("unexpected pos ...") when the file object's write failed (disk full)."""
    for _ in range(8):
        if exc is None or isinstance(exc, OSError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def atomic_link(src, final):
    """Make ``final`` name the same content as ``src`` (hard link, else copy), atomically."""
    if os.path.abspath(src) == os.path.abspath(final):
        return
    tmp = _tmp_path(final)
    try:
        with replacing(final, tmp):
            if os.path.exists(tmp):
                os.unlink(tmp)
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
    except OSError as exc:
        raise CheckpointError(f"cannot write checkpoint {final}: {exc.strerror or exc}; "
                              "the checkpoints written before it are intact") from None


def _enable_write_checksums():
    """Make sure torch.save stores the CRC-32s :func:`verify_checksums` reads back (it does by
    default; an off switch in user code would make every new checkpoint fail verification)."""
    getter = getattr(torch.serialization, "get_crc32_options", None)
    if getter is not None and not getter():
        torch.serialization.set_crc32_options(True)


def to_bytes(ckpt):
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    return buf.getvalue()


IMMUTABLE_ATOMS = frozenset({int, float, bool, str, bytes, type(None)})


def snapshot(obj, staging=None):
    """A copy of a checkpoint dict that later training steps cannot change: tensors are
    copied to CPU memory, containers rebuilt, anything else deep-copied.

    ``staging`` (a list) keeps the CPU buffers between saves, the n-th tensor met reusing the
    n-th buffer when shape and dtype match: copying into memory that is already mapped is
    several times faster than allocating it anew (no page faults).

    The copies run on this thread alone (one intra-op thread, restored afterwards): a copy is
    memory-bound, so a second thread gains little on an idle machine, while on a busy one
    every parallel copy waits for all its threads to get a core (resnet50's state took 0.2-1.9 s
    instead of 35-80 ms on 2 loaded cores).
    """
    staging = [] if staging is None else staging
    used = 0

    def rebuild(obj):
        nonlocal used
        if type(obj) in IMMUTABLE_ATOMS:  # most leaves (param indexes, hyper-parameters): no copy
            return obj
        if isinstance(obj, torch.Tensor):
            if used == len(staging):
                staging.append(None)
            buf = staging[used]
            if buf is None or buf.shape != obj.shape or buf.dtype != obj.dtype:
                buf = staging[used] = torch.empty(obj.shape, dtype=obj.dtype, device="cpu")
            used += 1
            return buf.copy_(obj)
        if isinstance(obj, dict):
            return {k: rebuild(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(rebuild(v) for v in obj)
        return copy.deepcopy(obj)

    with torch.no_grad(), one_intra_op_thread():
        return rebuild(obj)


@contextlib.contextmanager
def one_intra_op_thread():
    """torch's intra-op parallelism off for the calling thread's ops inside the block."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class CheckpointStore:
    """Owns save_dir: writes a state once under every name it is due, keeps latest current.

    With ``async_write`` the training loop is blocked only while the state is copied to CPU
    memory; serialization, fsync and renames run on a background thread. At most one write is
    in flight: the next save, :meth:`flush` and the end of training wait for it, and a failed
    background write is raised there. While the main thread writes or waits for a write,
    SIGINT/SIGTERM are held until the write has completed (:mod:`.checkpoint_signals`).
    """

    def __init__(self, save_dir, async_write=False):
        self.save_dir = save_dir
        self.async_write = async_write
        # One writer thread, started by the first background save and kept: starting a thread
        # per save made save() wait for the new thread to come up and hand the GIL back.
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="up-checkpoint-writer") if async_write else None
        self._in_flight = None  # the Future of the write in flight
        self._staging = []  # CPU buffers reused by every background write (one in flight)
        self._after_save = []  # listener(ckpt, paths) after every save (add_after_save)

    def add_after_save(self, listener):
        """Call ``listener(ckpt, paths)`` after every save that writes, interrupt snapshots too
        (safetensors_export writes its export beside each file); added once however often asked."""
        if listener not in self._after_save:
            self._after_save.append(listener)

    def path(self, name):
        return os.path.join(self.save_dir, name)

    def save(self, ckpt, names):
        """Write ``ckpt`` under ``names`` (first written, the rest linked); latest follows."""
        if not names:
            return []
        os.makedirs(self.save_dir, exist_ok=True)
        ckpt = dict(ckpt, format=FORMAT)
        self.flush()
        if not self.async_write:
            with stop_signals_held():  # a stop signal waits for the write (engine/checkpoint_signals.py)
                self._write(ckpt, names)
        else:
            self._in_flight = self._writer.submit(self._write, snapshot(ckpt, self._staging), names)
        paths = [self.path(n) for n in names]
        for listener in self._after_save:
            listener(ckpt, paths)
        return paths

    def _write(self, ckpt, names):
        _enable_write_checksums()
        first = self.path(names[0])
        atomic_write_bytes(first, lambda f: torch.save(ckpt, f))
        for name in names[1:]:
            atomic_link(first, self.path(name))
        if LATEST not in names:
            atomic_link(first, self.path(LATEST))
        # Only now, every name renamed into place: the log never announces a file that a full
        # disk or a kill kept from existing.
        log.info("checkpoint written: %s", ", ".join(self.path(n) for n in names))

    def flush(self):
        """Wait for the write in flight; raise its error, if it failed."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return
        with stop_signals_held():  # a stop signal waits for the write (engine/checkpoint_signals.py)
            error = in_flight.exception()
            if isinstance(error, CheckpointError):
                raise CheckpointError(str(error)) from None
            if error is not None:
                raise error

    def close(self):
        """Wait for the write in flight, then end the writer thread (a run in a process that
        goes on, the Python API's, leaves no thread behind). Raises what :meth:`flush` raises."""
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None
                self.async_write = False  # a later save writes on the calling thread

    def remove_stale_temp_files(self):
        """Delete temp files left by writers that were killed (their pid no longer runs)."""
        if not os.path.isdir(self.save_dir):
            return
        for name in os.listdir(self.save_dir):
            m = _TMP_RE.match(name)
            if m and not _pid_alive(int(m.group(1))):
                try:
                    os.unlink(self.path(name))
                    log.info("removed %s, left by an interrupted checkpoint write", name)
                except OSError:
                    pass

    def find_resumable(self):
        """(path, ckpt) of the checkpoint in save_dir furthest into training (the iteration,
        then the epoch it records: :func:`recorded_position`) that loads and validates; broken
        ones are skipped with a warning. On a tie the latest pointer wins, then the name: the
        same choice every time. File times play no part: a copy (``cp -r``) or a ``touch``
        changes them, not what a file holds.

        Files are ranked by their small header; only the chosen one (and any broken one ranked
        before it) is read in full. A file whose header does not say is loaded in full to rank
        it (or to say why it is broken)."""
        self.flush()
        if not os.path.isdir(self.save_dir):
            return None, None
        ranked = []
        for name in sorted(os.listdir(self.save_dir)):
            if not (name.endswith(".pth") and name.startswith("ckpt_")):
                continue
            path, ckpt = self.path(name), None
            position = recorded_position(path)
            if position is None:
                try:
                    ckpt = load_checkpoint(path)
                except CheckpointError as exc:
                    log.warning("auto_resume: skipping %s", exc)
                    continue
                position = position_of(ckpt) or (-1, -1)
            ranked.append((position, name == LATEST, name, path, ckpt))
        ranked.sort(key=lambda r: r[:3], reverse=True)
        for _, _, _, path, ckpt in ranked:
            try:
                return path, ckpt if ckpt is not None else load_checkpoint(path)
            except CheckpointError as exc:
                log.warning("auto_resume: skipping %s", exc)
        return None, None

    def epoch_checkpoints(self):
        """[(epoch, path)] of ckpt_e{e}.pth files, oldest first (for rotation)."""
        self.flush()
        out = []
        if os.path.isdir(self.save_dir):
            for name in os.listdir(self.save_dir):
                parsed = parse_name(name)
                if parsed and parsed[1] is None:
                    out.append((parsed[0], self.path(name)))
        return sorted(out)
