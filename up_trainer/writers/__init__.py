"""Summary writers for train_val_logger, registered in WRITERS by ``summary_writer`` name.

A writer has ``add_scalar(tag, value, step)``, ``add_scalars(main_tag, dict, step)``,
``flush()`` and ``close(timeout=None)``; optionally ``add_config(cfg)`` (the redacted
resolved config, at the start) and ``add_artifact(path, artifact_path)`` (the best
checkpoint and the plots, at the end). Its constructor takes ``logdir``, ``start_iter``
and ``start_epoch`` (supplied by the logger: where a resumed run continues) plus the user's
``writer_kwargs``. Heavy clients (tensorboardX, requests) are imported when a writer is
built, not here. metrics.csv / metrics.jsonl are
written by :class:`~up_trainer.writers.table.MetricsTable` whatever the writer. A writer
with ``images_from_hooks = True`` and ``add_image(tag, chw_array, step)`` also receives the
pictures eval_insight and visualize draw (TensorBoard gets them in their own event files).
Several writers run together through :class:`~up_trainer.writers.fanout.FanOutWriter`.
"""
from . import mlflow, pavi, tensorboard, wandb  # noqa: F401  (registration)
from .table import MetricsTable  # noqa: F401
