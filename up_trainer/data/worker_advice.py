"""The start-of-run advice when training waits for its data: how many DataLoader workers would
hide the loading behind the compute (the train_val_logger hook logs it once per run)."""
import math

from ..config.worker_limits import usable_cpus


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
