"""Input data checked once, when a dataset is built: one validator per annotation format
(:mod:`.coco`, :mod:`.up_jsonl` for UP's detection meta files, :mod:`.cls_meta` for
classification lists), sharing the value and box rules of :mod:`.common`.

What every validator guarantees of the records it hands a dataset: ids unique (a repeated id
is an error whatever ``on_bad_record`` says: which record it means cannot be known), required
keys present with the right types, numbers finite, boxes of positive size inside their image,
references (an annotation's image and category) pointing at something that exists. A problem
is one :class:`~up_trainer.errors.DataError` line naming the file and the element
(``train.json: images[3].id 7 repeats images[1].id``, ``meta.jsonl:12: instances[0]: ...``).

:func:`require_training_data` adds what only training needs: something to learn from.
"""
from ...errors import DataError


def require_training_data(dataset, path):
    """``dataset.train`` must hold labels: a dataset says what is missing through
    ``training_problem()`` (a COCO file without annotations, images without one box, an
    inference_only list); that is fine for evaluation or prediction, an error for training."""
    problem = getattr(dataset, "training_problem", None)
    message = problem() if problem is not None else None
    if message:
        raise DataError(f"{path}: {message}")
