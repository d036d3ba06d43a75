"""TensorBoard event files, written with tensorboardX's record format (imported only when a
writer is built).

Scalars are written on the calling thread, not through tensorboardX's SummaryWriter: its
background thread dies on a write error (a full disk), prints a traceback, and the next
``max_queue`` scalars then block training forever. Here a failed write is one RunFileError
(writers/run_files.py) on the training thread, where the run handles it: snapshot, one line.
"""
import os
import struct
import time

from ..registry import WRITERS
from .run_files import RunFileError, replacing, writing

EPOCH_AXIS_PREFIX = "metrics/"  # tags logged at the epoch step; every other tag at the iteration step


@WRITERS.register("tensorboard")
class TensorboardWriter:
    """tensorboardX event files under ``logdir``; read them with ``tensorboard --logdir``.

    Records are buffered and written out every ``flush_secs`` seconds or ``max_queue`` records,
    and at every :meth:`flush` (the logger flushes after each epoch and evaluation)."""

    def __init__(self, logdir: str, start_iter: int = 0, start_epoch: int = 0, flush_secs: int = 30,
                 max_queue: int = 100):
        self._open(logdir, flush_secs, max_queue, trim_to=(start_iter, start_epoch))

    @classmethod
    def extra_file(cls, logdir, suffix):
        """Another event file in ``logdir`` for a hook's own records (eval_insight, visualize),
        written the same way. ``suffix`` keeps its name apart (tensorboardX names files by the
        second and opens them 'wb': two files started in one second would be one); nothing is
        trimmed (the logger's writer trims every file of the logdir when the run starts)."""
        writer = cls.__new__(cls)
        writer._open(logdir, 30, 100, suffix=suffix)
        return writer

    def _open(self, logdir, flush_secs, max_queue, trim_to=None, suffix=""):
        from tensorboardX.event_file_writer import EventsWriter

        self.logdir = logdir
        self.flush_secs, self.max_queue = flush_secs, max_queue
        self._pending, self._flushed_at = 0, time.monotonic()
        self._failed = False  # a write failed: reported once, nothing more is written
        with writing(logdir):
            if trim_to is not None and os.path.isdir(logdir):
                trim_event_files(logdir, *trim_to)
            os.makedirs(logdir, exist_ok=True)
            # events.out.tfevents.<time>.<host><suffix>
            self._events = EventsWriter(os.path.join(logdir, "events"), filename_suffix=suffix)
        self.path = getattr(self._events, "_file_name", logdir)  # named in a failed write's message

    def add_scalar(self, tag, value, step):
        from tensorboardX.proto.summary_pb2 import Summary

        self._add(Summary(value=[Summary.Value(tag=tag, simple_value=float(value))]), step)

    def add_image(self, tag, image, step):
        """``image``: a CxHxW uint8 (or float in [0, 1]) array, stored as PNG."""
        from tensorboardX.summary import image as image_summary

        self._add(image_summary(tag, image, dataformats="CHW"), step)

    def _add(self, summary, step):
        from tensorboardX.proto.event_pb2 import Event

        self._guarded(self._events.write_event, Event(wall_time=time.time(), step=int(step), summary=summary))
        self._pending += 1
        if self._pending >= self.max_queue or time.monotonic() - self._flushed_at >= self.flush_secs:
            self.flush()

    def add_scalars(self, main_tag, values, step):
        # One plain scalar per key (tensorboardX's add_scalars would open a file per key).
        for k, v in values.items():
            self.add_scalar(f"{main_tag}/{k}", v, step)

    def flush(self):
        self._guarded(self._events.flush)
        self._pending, self._flushed_at = 0, time.monotonic()

    def close(self, timeout=None):
        """Write out what is buffered and close the file. After a failed write (already
        reported) the file is closed without another error."""
        if self._failed:
            try:
                self._events.close()
            except OSError:
                pass
            return
        self._guarded(self._events.close)

    def _guarded(self, write, *args):
        if self._failed:
            return
        try:
            with writing(self.path):
                write(*args)
        except RunFileError:
            self._failed = True
            raise


def _records(path):
    """Raw TFRecord frames (length, crc, data, crc) and their event payloads; stops at a
    frame cut short by a kill, or whose length field is garbage (a header half written when
    the writer was killed, or a foreign file): a length past the end of the file is never
    read, so a corrupt header cannot ask for gigabytes."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            if length + 4 > size - f.tell():
                return
            rest = f.read(length + 4)
            if len(rest) < length + 4:
                return
            yield header + rest, rest[:length]


def trim_event_files(logdir, max_iter, max_epoch):
    """Drop from earlier event files the scalars a resumed run will write again: steps after
    ``max_iter`` (iteration axis) and, for metrics/ tags, epochs after ``max_epoch``.

    TensorBoard's own purge_step cannot do this: it cuts every tag at one step, and our two
    step axes (iterations, epochs) need two cut points. A fresh run (0, 0) clears old scalars.
    """
    from tensorboardX.proto.event_pb2 import Event

    for name in sorted(os.listdir(logdir)):
        path = os.path.join(logdir, name)
        if "tfevents" not in name or not os.path.isfile(path):
            continue
        kept, dropped = [], 0
        for frame, payload in _records(path):
            try:
                event = Event.FromString(payload)
            except Exception:  # not an event: keep the bytes as they are
                kept.append(frame)
                continue
            if event.HasField("summary") and any(
                    event.step > (max_epoch if v.tag.startswith(EPOCH_AXIS_PREFIX) else max_iter)
                    for v in event.summary.value):
                dropped += 1
                continue
            kept.append(frame)
        if dropped:
            with replacing(path) as tmp:
                with open(tmp, "wb") as f:
                    f.write(b"".join(kept))
