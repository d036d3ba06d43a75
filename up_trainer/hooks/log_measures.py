"""What train_val_logger measures and how its lines show it: phase timers, loss values read
from a model's outputs, peak memory, and the small formatters of a log line."""
import math
import sys

PHASES = ("data", "forward", "backward", "batch")


class PhaseTimer:
    """Sums of the phase times over the current window and since training (re)started."""

    def __init__(self):
        self.win = [0.0] * len(PHASES)
        self.total = [0.0] * len(PHASES)
        self.win_n = self.total_n = 0
        self.raw_batch = 0.0  # every iteration, skipped ones too: an ETA before any is counted
        self.raw_n = 0

    def add(self, times):
        for i, t in enumerate(times):
            self.win[i] += t
            self.total[i] += t
        self.win_n += 1
        self.total_n += 1

    def averages(self):
        win = [s / self.win_n if self.win_n else None for s in self.win]
        tot = [s / self.total_n if self.total_n else None for s in self.total]
        return win, tot

    def reset_window(self):
        self.win = [0.0] * len(PHASES)
        self.win_n = 0

    def per_iter(self):
        if self.total_n:
            return self.total[-1] / self.total_n
        return self.raw_batch / self.raw_n if self.raw_n else None


def loss_values(outputs):
    """Each ``*loss*`` output as a float and their sum (``loss``, or ``total_loss`` when the
    model already returns a key named ``loss`` beside others). Calls .item(): log lines only."""
    losses = {}
    for k, v in (outputs or {}).items():
        if "loss" in k:
            value = as_number(v)
            if value is not None:
                losses[k] = value
    if len(losses) > 1 or (losses and "loss" not in losses):
        losses["total_loss" if "loss" in losses else "loss"] = sum(losses.values())
    return losses


def as_number(v):
    if v is None or isinstance(v, bool):
        return None
    if hasattr(v, "detach"):  # a tensor: one element only
        if v.numel() != 1:
            return None
        return float(v.detach().float().item())
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def max_memory_mb(device):
    """Peak CUDA memory allocated on ``device``; on CPU the process's peak RSS."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2 ** 20 if sys.platform == "darwin" else peak / 2 ** 10  # bytes on macOS, KiB on Linux
    except (ImportError, OSError):
        return _proc_rss_mb()


def _proc_rss_mb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    return int(line.split()[1]) / 2 ** 10
    except OSError:
        pass
    return None


def isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def fmt_seconds(seconds):
    return "-" if seconds is None else f"{seconds:.3f}"


def hms(seconds):
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
