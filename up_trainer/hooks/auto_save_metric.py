"""auto_save_metric (UP): every evaluation of a training run, appended to one JSON file.

The file is a JSON list of ``{"metrics": {...}, "iter": i, "epoch": e}``, rewritten atomically
after each evaluation (temp file + rename), so a reader never sees half a file. A resumed run
first drops the entries made after its resume point (they belonged to the killed run and are
evaluated again), so the file matches an uninterrupted run. ``up train -e`` / ``up eval``
evaluations are not recorded, as in UP.
"""
import json
import logging
import os

from ..atomic import write_json
from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")


def _plain(value):
    """Metric values as JSON numbers (tensors and numpy scalars included)."""
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (TypeError, ValueError, RuntimeError):
            pass
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@HOOKS.register("auto_save_metric")
class AutoSaveMetric(Hook):
    """Append each training evaluation's metrics, iteration and epoch to a JSON list file.

    metric_json: the file (relative paths resolve against --work-dir). detail_metric: a JSON
    file (written by your evaluator) whose content is recorded instead of the metrics when it
    exists; empty: always the metrics.
    """

    priority = "LOW"

    def __init__(self, metric_json: str = "checkpoints/metric.json", detail_metric: str = ""):
        super().__init__()
        if not metric_json:
            raise ConfigError("metric_json", "expected a file path")
        self.metric_json = metric_json
        self.detail_metric = detail_metric
        self.path = None
        self.entries = []

    @classmethod
    def output_dirs(cls, kwargs):
        path = cls.configured(kwargs, "metric_json")
        if not isinstance(path, str) or not path:
            return []  # refused where the hook is built
        return [("metric_json", os.path.dirname(path) or ".", (os.path.basename(path),))]

    def _resolve(self, trainer, path):
        return path if os.path.isabs(path) else os.path.join(trainer.run_dir, path)

    def before_train(self, trainer):
        self.path = self._resolve(trainer, self.metric_json)
        self.entries = self._read(self.path)
        done = trainer.state.iter
        kept = [e for e in self.entries if isinstance(e, dict) and e.get("iter", 0) <= done]
        if len(kept) != len(self.entries) and trainer.dist.is_main:
            log.info("auto_save_metric: dropped %d entries after iteration %d from %s", len(self.entries) - len(kept),
                     done, self.path)
            self.entries = kept
            self._write()

    @staticmethod
    def _read(path):
        if not os.path.exists(path):
            return []
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            log.warning("auto_save_metric: cannot read %s (%s); starting a new list", path, exc)
            return []
        if not isinstance(data, list):
            log.warning("auto_save_metric: %s is not a JSON list; starting a new list", path)
            return []
        return data

    def after_eval(self, trainer, metrics):
        if self.path is None or trainer.optim is None or not trainer.dist.is_main:
            return  # evaluation only (no before_train), or not the main process
        recorded = _plain(dict(metrics))
        detail = self._resolve(trainer, self.detail_metric) if self.detail_metric else None
        if detail and os.path.exists(detail):
            recorded = self._read_detail(detail)
        self.entries.append({"metrics": recorded, "iter": trainer.state.iter, "epoch": trainer.state.epoch})
        self._write()

    @staticmethod
    def _read_detail(path):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError) as exc:
            raise ConfigError("detail_metric", f"cannot read {path}: {exc}") from None

    def _write(self):
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        write_json(self.path, self.entries, indent=2)
