"""eval_insight: after each evaluation, write where the model fails to results_dir and TensorBoard."""
import logging
import os

from ..errors import ConfigError
from ..protocols import WritesInsight
from ..registry import HOOKS
from ..writers.run_files import storage_error
from .base import Hook
from .train_val_logger import send_images

log = logging.getLogger("up")


def write_insight(trainer, results, num_wrong=16, score_thr=0.3):
    """The evaluator's insight on ``results`` into trainer.results_dir; None when the evaluator
    has none. A failure is logged, never raised: insight must not end a run."""
    if not isinstance(trainer.evaluator, WritesInsight) or results is None or not trainer.results_dir:
        return None
    from ..engine.rng import rng_state, set_rng_state

    kwargs = {"num_wrong": num_wrong} if hasattr(trainer.evaluator, "topk") else {"score_thr": score_thr}
    saved = rng_state()  # reading test images may draw random transforms: a resume stays exact
    try:
        return trainer.evaluator.insight(results, trainer.results_dir, dataset=trainer.loaders.test_set, **kwargs)
    except Exception as exc:  # a plotting or data problem must not fail the run ...
        if storage_error(exc) is not None:  # ... a full disk ends it as for any run file (writers/run_files.py)
            raise storage_error(exc) from None
        log.warning("evaluation insight not written: %s: %s", type(exc).__name__, exc)
        return None
    finally:
        set_rng_state(saved)


@HOOKS.register("eval_insight")
class EvalInsight(Hook):
    """Write evaluation insight to results_dir after every ``interval``-th evaluation (a default hook).

    Classification: confusion_matrix.csv/.png, per_class.csv (precision, recall), and
    confidently_wrong.png (the ``num_wrong`` wrong predictions scored highest). Detection:
    pr_curves.png, confusion_matrix.csv/.png with a background row and column (detections
    with score >= ``score_thr``), ap_by_size.csv/.png. Files are replaced at each evaluation;
    with ``tensorboard: true`` the pictures (``insight/*``) and per-class numbers also go to
    TensorBoard under ``run_dir/<logdir>`` at the epoch, so every evaluation stays viewable.
    """

    priority = "LOW"

    @classmethod
    def output_dirs(cls, kwargs):
        if not cls.configured(kwargs, "tensorboard"):
            return []
        return [("logdir", cls.configured(kwargs, "logdir"), lambda name: name.startswith("events.out.tfevents."))]

    def __init__(self, interval: int = 1, num_wrong: int = 16, score_thr: float = 0.3, tensorboard: bool = True,
                 logdir: str = "log"):
        super().__init__()
        for key, value, low in (("interval", interval, 1), ("num_wrong", num_wrong, 0)):
            if value < low:
                raise ConfigError(key, f"must be >= {low}, got {value}")
        if not 0.0 <= score_thr <= 1.0:
            raise ConfigError("score_thr", f"must be in [0, 1], got {score_thr}")
        self.interval, self.num_wrong, self.score_thr = interval, num_wrong, score_thr
        self.tensorboard, self.logdir = tensorboard, logdir
        self.evals = 0  # evaluations seen, so the interval survives a resume
        self._writer = None

    def after_eval(self, trainer, metrics):
        self.evals += 1
        if self.evals % self.interval or not trainer.dist.is_main:
            return
        insight = write_insight(trainer, trainer.last_results, self.num_wrong, self.score_thr)
        if insight is None:
            return
        log.info("evaluation insight: %s", ", ".join(os.path.basename(f) for f in insight.files))
        if self.tensorboard:
            self._to_tensorboard(trainer, insight)
        send_images(trainer, insight.images, trainer.state.epoch)

    def _to_tensorboard(self, trainer, insight):
        try:
            if self._writer is None:  # lazy: tensorboardX is heavy, and only rank 0 writes
                from ..writers.tensorboard import TensorboardWriter

                self._writer = TensorboardWriter.extra_file(os.path.join(trainer.run_dir, self.logdir), ".insight")
        except ImportError as exc:
            log.warning("eval_insight: no TensorBoard output (%s)", exc)
            self.tensorboard = False
            return
        epoch = trainer.state.epoch
        for tag, image in insight.images.items():
            self._writer.add_image(tag, image.numpy(), epoch)
        for tag, value in insight.scalars.items():
            self._writer.add_scalar(tag, value, epoch)
        self._writer.flush()

    def after_train(self, trainer):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def on_exception(self, trainer, exc):
        self.after_train(trainer)

    def state_dict(self):
        return {"evals": self.evals}

    def load_state_dict(self, state):
        self.evals = int(state.get("evals", 0))
