"""Every error met while one sample is produced becomes one :class:`~up_trainer.errors.DataError`
naming the sample: its file (and the line of its list or annotation file, where there is one),
the step that failed (decode, a transform of the pipeline by name, the annotation, the final
conversion) and its split and index.

One mechanism for every dataset and every way of loading: the loaders (loader.py) fetch each
sample through :func:`fetch_sample`, in the main process and in DataLoader workers alike, and
a DataError raised in a worker comes back to the main process as that one line
(:func:`worker_error_as_raised`), whichever way the workers hand their batches over (the batch
ring or torch's own). A user error raised by the dataset itself (an unreadable image, a bad
record) already names its record and passes unchanged; so do MemoryError (a machine limit, not
the sample) and interrupts.
"""
from torch.utils.data import Subset

from ..errors import DataError, UserError

# Functions of the datasets' and readers' code whose failure is the named step (the innermost
# one on the traceback wins; a transform of the pipeline wins over all of them).
_STEPS = {
    "decode_image": "decode", "decode_file": "decode", "load_image": "decode", "read_image": "decode",
    "_decode_pillow": "decode", "read": "decode", "_image": "decode", "_load": "decode",
    "target_of": "annotation", "_check_size": "annotation",
    "finish": "final conversion",
}


def fetch_sample(dataset, index, split):
    """``dataset[index]``, any error but a user error named as the module docstring says."""
    try:
        return dataset[index]
    except (UserError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - every per-sample failure is the sample's, named
        raise DataError(describe_failure(dataset, index, split, exc)) from None


def describe_failure(dataset, index, split, exc):
    """``<file[:line]>: <step> failed on <split> sample <index>: <Type>: <message>``."""
    inner, inner_index = _unwrapped(dataset, index)
    message = " ".join(str(exc).split()) or "(no message)"
    return (f"{sample_source(inner, inner_index)}: {_failed_step(exc, inner)} failed on {split} sample "
            f"{index}: {type(exc).__name__}: {message}")


def sample_source(dataset, index):
    """Where sample ``index`` comes from, as the datasets name their records: ``list.txt:12
    (images/a.png)``, a detection record's ``source`` (which names its annotation), or the
    image's path; ``sample N`` for data held in memory."""
    try:
        row = _row(dataset, index)
        if isinstance(row, dict):
            source, path = row.get("source"), row.get("file")
            text = str(source or path or f"sample {index}")
            return text if not isinstance(path, str) or path in text else f"{text} ({path})"
        if isinstance(row, (tuple, list)) and row and isinstance(row[0], str):
            lineno = row[2] if len(row) > 2 and isinstance(row[2], int) else None
            listing = getattr(dataset, "meta_file", None)
            return f"{listing}:{lineno} ({row[0]})" if isinstance(listing, str) and lineno else row[0]
    except Exception:  # noqa: BLE001 - the name of a sample must never hide the sample's error
        pass
    return f"sample {index}"


def _row(dataset, index):
    for name in ("records", "samples"):
        rows = getattr(dataset, name, None)
        if rows is not None:
            return rows[index]
    return None


def _unwrapped(dataset, index):
    """The dataset that holds the records and the index into it (Subsets walked)."""
    while isinstance(dataset, Subset):
        dataset, index = dataset.dataset, dataset.indices[index]
    return dataset, index


def _pipeline_ops(transform):
    """Every transform object of a pipeline, its containers (Compose, RandomApply...) walked."""
    if transform is None:
        return
    yield transform
    for child in getattr(transform, "transforms", None) or ():
        yield from _pipeline_ops(child)


def _failed_step(exc, dataset):
    ops = {id(op) for op in _pipeline_ops(getattr(dataset, "transform", None))}
    transform, step = None, None
    tb = exc.__traceback__
    while tb is not None:  # outermost to innermost
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        if owner is not None and id(owner) in ops:
            transform = type(owner).__name__  # Compose, then what it runs: the innermost is the one
        elif frame.f_code.co_name in _STEPS:
            step = _STEPS[frame.f_code.co_name]
        tb = tb.tb_next
    if transform is not None:
        return f"transform {transform}"
    return step or "loading"


def worker_error_as_raised(exc):
    """A DataError a DataLoader worker raised, as the main process gets it back (torch puts the
    worker's traceback into its text): the same one line, as raised in the worker; None for
    anything else."""
    text = str(exc)
    if type(exc) is not DataError or "Original Traceback" not in text:
        return None
    from ..exits import one_line

    return DataError(one_line(text))
