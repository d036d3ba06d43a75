"""Shared by the API tests: a config that trains in about a second, and a record of the
process state a run may change."""
import logging
import multiprocessing
import os
import random
import signal
import threading

import numpy as np
import torch

from conftest import tiny_cfg


def fast_cfg(**sections):
    """tiny_cfg with a net of a few hundred weights (tests/plugins/tiny_net_plugin.py)."""
    sections.setdefault("runtime", {"seed": 3, "imports": ["tiny_net_plugin"]})
    sections.setdefault("net", {"type": "tiny_convnet", "kwargs": {"num_classes": 10, "in_channels": 1}})
    return tiny_cfg(**sections)


def _signals():
    out = {}
    for sig in signal.valid_signals():
        try:
            out[sig] = signal.getsignal(sig)
        except (OSError, ValueError):
            pass
    return out


def open_files():
    """{fd: what it points to} of this process. Not counted: matplotlib's font files, which its
    font cache opens at the first plot of the process and keeps for every later one."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(os.path.join("/proc/self/fd", fd))
        except OSError:  # the directory's own descriptor, closed by now
            continue
        if os.sep + "mpl-data" + os.sep not in target:
            out[fd] = target
    return out


def process_state():
    """Everything an API call must leave as it found it, comparable with ==."""
    up = logging.getLogger("up")
    return {
        "threads": sorted(f"{t.name} {t.ident}" for t in threading.enumerate()),
        "children": sorted(p.pid for p in multiprocessing.active_children()),
        "fds": open_files(),
        "up_logger": (list(up.handlers), up.level, up.propagate),
        "root_logger": (list(logging.getLogger().handlers), logging.getLogger().level),
        "signals": _signals(),
        "torch_threads": torch.get_num_threads(),
        "deterministic": (torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled()),
        "cudnn": (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark),
        "matmul": torch.get_float32_matmul_precision(),
        "dtype": torch.get_default_dtype(),
        "grad": torch.is_grad_enabled(),
        "torch_rng": torch.get_rng_state().tolist(),
        "numpy_rng": np.random.get_state()[1].tolist(),
        "python_rng": random.getstate(),
        "env": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


# What a call may only add to (a leak); something of an earlier test that ends meanwhile (a
# thread finishing, a file closed by the garbage collector) is no change made by the call.
ADDED_ONLY = ("threads", "children", "fds")


def changed(before, after):
    """The items of process_state() the call changed: for threads, child processes and open
    files, those it left behind."""
    out = []
    for key in before:
        if key in ADDED_ONLY and before[key] is not None:
            new = set(after[key].items() if isinstance(after[key], dict) else after[key])
            old = set(before[key].items() if isinstance(before[key], dict) else before[key])
            if new - old:
                out.append(key)
        elif before[key] != after[key]:
            out.append(key)
    return sorted(out)
