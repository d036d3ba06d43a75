"""TensorBoard event files through tensorboardX (imported only when a writer is built)."""
import logging
import os
import struct

from ..registry import WRITERS

EPOCH_AXIS_PREFIX = "metrics/"  # tags logged at the epoch step; every other tag at the iteration step


@WRITERS.register("tensorboard")
class TensorboardWriter:
    """tensorboardX event files under ``logdir``; read them with ``tensorboard --logdir``."""

    def __init__(self, logdir: str, start_iter: int = 0, start_epoch: int = 0, flush_secs: int = 30,
                 max_queue: int = 100):
        from tensorboardX import SummaryWriter

        # tensorboardX warns "NaN or Inf found in input tensor" on every such scalar; the value is
        # still written, and a non-finite loss or gradient norm (fp16 steps the scaler skips) is
        # already reported in our own log, so the stray console line is dropped.
        logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)
        self.logdir = logdir
        if os.path.isdir(logdir):
            trim_event_files(logdir, start_iter, start_epoch)
        self._w = SummaryWriter(logdir=logdir, flush_secs=flush_secs, max_queue=max_queue)

    def add_scalar(self, tag, value, step):
        self._w.add_scalar(tag, float(value), int(step))

    def add_scalars(self, main_tag, values, step):
        # One plain scalar per key (tensorboardX's add_scalars would open a file per key).
        for k, v in values.items():
            self.add_scalar(f"{main_tag}/{k}", v, step)

    def flush(self):
        self._w.flush()

    def close(self, timeout=None):
        self._w.close()


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
            tmp = path + ".trim"
            with open(tmp, "wb") as f:
                f.write(b"".join(kept))
            os.replace(tmp, path)
