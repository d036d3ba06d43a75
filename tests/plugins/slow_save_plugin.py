"""Loaded through runtime.imports by the crash test: makes the N-th checkpoint write stall
half-way (after real bytes reached the temp file) so a SIGKILL lands inside the write.
Every write from the N-th on stalls for UP_TEST_STALL_SECONDS (default 60)."""
import os
import time

import torch

from up_trainer.engine import checkpoint

_real_save = torch.save
_calls = {"n": 0}


def _stalling_save(obj, f, *args, **kwargs):
    _calls["n"] += 1
    if _calls["n"] < int(os.environ.get("UP_TEST_STALL_AT", "2")) or not hasattr(f, "write"):
        return _real_save(obj, f, *args, **kwargs)
    import io

    buf = io.BytesIO()
    _real_save(obj, buf, *args, **kwargs)
    data = buf.getvalue()
    f.write(data[: len(data) // 2])
    f.flush()
    open(os.environ["UP_TEST_MARKER"], "w").close()
    time.sleep(float(os.environ.get("UP_TEST_STALL_SECONDS", "60")))
    f.write(data[len(data) // 2:])


checkpoint.torch.save = _stalling_save
