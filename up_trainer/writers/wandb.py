"""Weights & Biases writer: scalars per step, the resolved config, the pictures the
eval_insight and visualize hooks draw, and the best checkpoint as an artifact when asked,
through W&B's own client (``pip install up-trainer[wandb]``).

Two step axes, as the other writers keep them: ``metrics/*`` (evaluations) on ``epoch``, every
other tag on ``iteration``; both are W&B metrics declared with ``define_metric``, so one
run's charts take either as their x axis and a late epoch value is never dropped for a lower
step. ``mode``: W&B's own (``online``, ``offline``, ``disabled``; None: what ``WANDB_MODE``
or W&B's settings say). Offline, the run is kept under ``<logdir>/wandb`` for ``wandb sync``.
A resumed run (start_iter > 0) continues the W&B run whose id is kept in
``<logdir>/wandb_run_id``.

Nothing outlives :meth:`close`: the run is finished, and W&B's service process and threads
are ended when no other W&B run of the process is active (an API call leaves no process
behind, api/isolation.py).
"""
import logging
import os
from typing import Optional

from ..config.redact import redact_text
from ..errors import ConfigError
from ..registry import WRITERS
from .run_files import write_text
from .tensorboard import EPOCH_AXIS_PREFIX

log = logging.getLogger("up")
RUN_ID_FILE = "wandb_run_id"
MODES = ("online", "offline", "disabled")
ITERATION, EPOCH = "iteration", "epoch"
EPOCH_PREFIXES = (EPOCH_AXIS_PREFIX, "insight/")  # evaluations and eval_insight's pictures
ITERATION_PREFIXES = ("train/", "vis/")  # the logger's lines; visualize's grids


@WRITERS.register("wandb")
class WandbWriter:
    """Scalars, the redacted config, hook pictures and (``log_checkpoint``) the best checkpoint into W&B."""

    images_from_hooks = True  # train_val_logger forwards eval_insight's / visualize's pictures

    def __init__(self, logdir: str, start_iter: int = 0, start_epoch: int = 0, project: str = "up-trainer",
                 entity: Optional[str] = None, name: Optional[str] = None, group: Optional[str] = None,
                 tags: Optional[list] = None, mode: Optional[str] = None, log_checkpoint: bool = False):
        self.validate_kwargs({"mode": mode, "tags": tags})
        import wandb

        os.makedirs(logdir, exist_ok=True)
        self.logdir = logdir
        self.log_checkpoint = log_checkpoint
        run_id = self._resumed_id(start_iter)
        settings = wandb.Settings(console="off", silent=True, **({"mode": mode} if mode else {}))
        name = name or os.path.basename(os.path.dirname(os.path.abspath(logdir))) or None
        with _offline_environment(mode):
            try:
                self.run = wandb.init(project=project, entity=entity, name=name, group=group, tags=tags, dir=logdir,
                                      id=run_id, resume="allow" if run_id else None, reinit="create_new",
                                      settings=settings)
            except wandb.errors.Error as exc:  # no login, an unreachable server, a refused project
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise ConfigError("train_val_logger.writer_kwargs", f"W&B refused the run: {redact_text(first)[:300]}",
                                  "log in (wandb login), or set mode: offline") from None
        self.run.define_metric(ITERATION, hidden=True)
        self.run.define_metric(EPOCH, hidden=True)
        for prefix in EPOCH_PREFIXES:
            self.run.define_metric(prefix + "*", step_metric=EPOCH)
        for prefix in ITERATION_PREFIXES:
            self.run.define_metric(prefix + "*", step_metric=ITERATION)
        write_text(os.path.join(logdir, RUN_ID_FILE), self.run.id)
        self._pending = {}  # (axis, step) -> values, sent together at flush
        self._closed = False
        log.info("wandb: run %s (%s) in %s", self.run.id, self.run.settings.mode, logdir)

    @staticmethod
    def validate_kwargs(kwargs):
        """Checked when the config is loaded (train_val_logger), before any run starts."""
        mode = kwargs.get("mode")
        if mode is not None and mode not in MODES:
            raise ConfigError("mode", f"{mode!r} is not one of {', '.join(MODES)}")
        tags = kwargs.get("tags")
        if tags is not None and not all(isinstance(t, str) for t in tags):
            raise ConfigError("tags", "expected a list of strings")

    def _resumed_id(self, start_iter):
        path = os.path.join(self.logdir, RUN_ID_FILE)
        if start_iter <= 0 or not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None

    # -- the writer interface -----------------------------------------------------------------
    def add_scalar(self, tag, value, step):
        axis = EPOCH if tag.startswith(EPOCH_PREFIXES) else ITERATION
        self._pending.setdefault((axis, int(step)), {})[tag] = float(value)

    def add_scalars(self, main_tag, values, step):
        for k, v in values.items():
            self.add_scalar(f"{main_tag}/{k}", v, step)

    def add_image(self, tag, image, step):
        """``image``: a CxHxW uint8 (or float in [0, 1]) array, as TensorBoard's add_image takes."""
        import numpy as np
        import wandb

        array = np.asarray(image)
        if array.dtype != np.uint8:
            array = (np.clip(array, 0, 1) * 255).round().astype(np.uint8)
        array = array.transpose(1, 2, 0)
        axis = EPOCH if tag.startswith(EPOCH_PREFIXES) else ITERATION
        self._pending.setdefault((axis, int(step)), {})[tag] = wandb.Image(array[..., 0] if array.shape[2] == 1
                                                                           else array)

    def flush(self):
        pending, self._pending = self._pending, {}
        for (axis, step), values in sorted(pending.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            self.run.log({**values, axis: step})

    def close(self, timeout=None):
        if self._closed:
            return
        self._closed = True
        import wandb

        try:
            self.flush()
        finally:
            self.run.finish()
            if wandb.run is None:  # no other run of this process: end W&B's service and threads
                wandb.teardown()

    # -- what only some writers take ------------------------------------------------------------
    def add_config(self, cfg):
        """The resolved config (already redacted by the caller)."""
        self.run.config.update(cfg, allow_val_change=True)

    def add_artifact(self, path, artifact_path=None):
        """The best checkpoint as a model artifact when ``log_checkpoint``; plots as images."""
        import wandb

        if not os.path.exists(path):
            return
        if path.endswith(".png"):
            self.run.log({f"files/{os.path.basename(path)}": wandb.Image(path)})
        elif artifact_path == "checkpoints" and self.log_checkpoint:
            artifact = wandb.Artifact(f"model-{self.run.id}", type="model")
            artifact.add_file(path)
            self.run.log_artifact(artifact, aliases=["best"])


class _offline_environment:
    """W&B reads ``WANDB_MODE`` from the environment while it starts (its telemetry exporter,
    whose threads outlive the run, starts unless the process looks offline): set for the
    start of an offline run only, then put back."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        self.saved = os.environ.get("WANDB_MODE")
        if self.mode in ("offline", "disabled") and self.saved is None:
            os.environ["WANDB_MODE"] = self.mode

    def __exit__(self, *exc):
        if self.saved is None:
            os.environ.pop("WANDB_MODE", None)
        else:
            os.environ["WANDB_MODE"] = self.saved
