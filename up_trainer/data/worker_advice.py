"""The start-of-run advice when training waits for its data: how many DataLoader workers would
hide the loading behind the compute (the train_val_logger hook logs it once per run)."""
import math
import os


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# More workers than this are refused at start-up (config validation, so ``up config`` and
# ``--dry-run`` say so too): each is a forked process with its own copy of whatever it touches,
# and thousands of them fork for minutes with the stop signals blocked (loader.py) and exhaust
# memory or the process table before the first batch. Past 4 per CPU they only queue for the
# same cores; 32 leaves room for I/O-bound data on a small machine.
WORKERS_PER_CPU = 4
MIN_WORKER_BOUND = 32


def max_workers(cpus=None):
    return max(MIN_WORKER_BOUND, WORKERS_PER_CPU * (cpus or usable_cpus()))


def check_worker_count(num_workers, where="dataset.num_workers"):
    """A ConfigError naming ``where`` when ``num_workers`` is beyond :func:`max_workers`."""
    from ..errors import ConfigError

    cpus = usable_cpus()
    bound = max_workers(cpus)
    if num_workers > bound:
        raise ConfigError(where, f"{num_workers} worker processes are more than this machine can use: at most "
                          f"{bound} ({WORKERS_PER_CPU} per CPU x {cpus} CPUs here, never below {MIN_WORKER_BOUND})",
                          f"set {where} to {bound} or fewer; about the CPU count is usually enough")


def worker_advice(data_s, batch_s, workers, cache="none", cpus=None):
    """One line when a step waits longer for its batch (``data_s``) than it computes
    (``batch_s - data_s``), else None.

    In the main process (no workers) the wait is the whole time to load a batch. With W
    workers in a steady state each delivers one batch every W steps, so a batch costs a worker
    about W x ``batch_s``. Hiding that behind the compute takes load time / compute workers;
    one CPU stays with the main process, so more workers than the other CPUs would not help.
    """
    compute = batch_s - data_s
    if compute <= 0 or data_s <= compute:
        return None
    cpus = cpus or usable_cpus()
    load = data_s if workers == 0 else workers * batch_s
    wanted = max(math.ceil(load / compute), workers + 1)
    room = max(cpus - 1, 1)
    text = (f"data loading is the bottleneck: each step waits {data_s:.3f} s for its batch and computes "
            f"{compute:.3f} s with dataset.num_workers {workers}; ")
    if workers < room:
        text += f"try dataset.num_workers: {min(wanted, room)} ({cpus} CPUs here)"
        if wanted > room:
            text += ", and a lighter pipeline"
    else:
        text += f"more workers than the {cpus} CPUs here would not help: a lighter pipeline would"
    if cache == "none":
        text += "; dataset.cache: ram skips decoding from the second epoch"
    return text
