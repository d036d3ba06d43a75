"""How many DataLoader workers a run may start on this machine, checked when the config is
validated (so ``up config``, ``--dry-run`` and the Python API refuse too many as ``up train``
does)."""
import os

from ..errors import ConfigError


def usable_cpus():
    """The CPUs this process may run on (its affinity mask: a container's or a job's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# More workers than this are refused: each is a forked process with its own copy of whatever it touches,
# and thousands of them fork for minutes with the stop signals blocked (loader.py) and exhaust
# memory or the process table before the first batch. Past 4 per CPU they only queue for the
# same cores; 32 leaves room for I/O-bound data on a small machine. The bound is the machine's,
# not the data's: more workers than an epoch has batches only leaves some idle, and the batch
# count is not known before the datasets are read, after the check has to be made.
WORKERS_PER_CPU = 4
MIN_WORKER_BOUND = 32


def max_workers(cpus=None):
    return max(MIN_WORKER_BOUND, WORKERS_PER_CPU * (cpus or usable_cpus()))


def check_worker_count(num_workers, where="dataset.num_workers"):
    """A ConfigError naming ``where`` when ``num_workers`` is beyond :func:`max_workers`."""
    cpus = usable_cpus()
    bound = max_workers(cpus)
    if num_workers > bound:
        raise ConfigError(where, f"{num_workers} worker processes are more than this machine can use: at most "
                          f"{bound} ({WORKERS_PER_CPU} per CPU x {cpus} CPUs here, never below {MIN_WORKER_BOUND})",
                          f"set {where} to {bound} or fewer; about the CPU count is usually enough")
