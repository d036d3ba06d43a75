"""MLflow writer: scalars, the config as params, the best checkpoint and plots as artifacts,
into a local MLflow store (no server) through mlflow's own client.

The store is ``<logdir>/mlruns`` unless ``tracking_uri`` names another (a server's URL works
too). MLflow 3 keeps its file store behind ``MLFLOW_ALLOW_FILE_STORE``: for a ``file:`` store
this writer sets it (only if unset), since a local directory is the point here; the
database stores need SQLAlchemy, which mlflow-skinny does not bring.

Scalars are buffered and sent with ``log_batch`` at ``flush()`` (every log line's epoch end
and evaluation) and at ``close()``. A resumed run (start_iter > 0) continues the MLflow run
whose id is kept in ``<logdir>/mlflow_run_id``; MLflow's metric history is append-only, so
steps the killed run logged after its checkpoint appear twice there (metrics.csv has them
once). mlflow-skinny is an optional dependency: ``pip install up-trainer[mlflow]``.

A tracking store that cannot be reached or refuses the run stops it at start, in one line
(exit 2) naming ``tracking_uri`` with its credentials redacted: an http(s) server gets one
request first (``PROBE_TIMEOUT_S``), so a dead one is not waited on through MLflow's retries.
"""
import logging
import os
import re
import time
from typing import Optional

from ..config.redact import redact_text
from ..errors import ConfigError
from ..registry import WRITERS
from .run_files import write_text

log = logging.getLogger("up")
RUN_ID_FILE = "mlflow_run_id"
MAX_PARAM_CHARS = 6000  # MLflow's limit on one param value (longer values are cut, marked ...)
_BAD_KEY_CHARS = re.compile(r"[^\w\-. /]")  # MLflow keys: alphanumerics, _ - . space /
PROBE_TIMEOUT_S = 10.0
URI_PATH = "train_val_logger.writer_kwargs.tracking_uri"


def metric_key(tag):
    return _BAD_KEY_CHARS.sub("_", tag)


def flatten(cfg, prefix=""):
    """{"a": {"b": 1}, "l": [x, y]} -> {"a.b": "1", "l.0": ..., ...}: one MLflow param per leaf."""
    out = {}
    if isinstance(cfg, dict) and cfg:
        for k, v in cfg.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(cfg, (list, tuple)) and cfg:
        for i, v in enumerate(cfg):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        text = str(cfg)
        out[metric_key(prefix[:-1])] = text if len(text) <= MAX_PARAM_CHARS else text[:MAX_PARAM_CHARS - 3] + "..."
    return out


def probe_server(tracking_uri):
    """One GET to an http(s) tracking server: any answer will do; none is a ConfigError."""
    from urllib.parse import urlsplit, urlunsplit

    import requests

    parts = urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https"):
        return
    netloc = parts.netloc.rpartition("@")[2]  # credentials stay out of the probe
    try:
        requests.get(urlunsplit((parts.scheme, netloc, parts.path or "/", "", "")), timeout=PROBE_TIMEOUT_S,
                     allow_redirects=False).close()
    except requests.RequestException as exc:
        errno = re.search(r"\[Errno -?\d+\][^'\")]*", str(exc))
        why = errno.group(0).strip() if errno else ("no answer in %g s" % PROBE_TIMEOUT_S
                                                    if isinstance(exc, requests.Timeout) else type(exc).__name__)
        raise ConfigError(URI_PATH, f"cannot reach the MLflow tracking server {redact_text(tracking_uri)} ({why})",
                          "start the server, fix the URL, or log locally: leave tracking_uri unset") from None


@WRITERS.register("mlflow")
class MlflowWriter:
    """Scalars, params (the redacted config) and artifacts into MLflow (local ``mlruns`` by default)."""

    def __init__(self, logdir: str, start_iter: int = 0, start_epoch: int = 0, tracking_uri: Optional[str] = None,
                 experiment: str = "up-trainer", run_name: Optional[str] = None):
        from mlflow.tracking import MlflowClient

        os.makedirs(logdir, exist_ok=True)
        self.logdir = logdir
        if tracking_uri is None:
            tracking_uri = "file://" + os.path.abspath(os.path.join(logdir, "mlruns"))
        if tracking_uri.startswith("file:") or "://" not in tracking_uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.tracking_uri = tracking_uri
        probe_server(tracking_uri)
        from mlflow.exceptions import MlflowException

        try:
            self.client = MlflowClient(tracking_uri=tracking_uri)
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
            self.run_id = self._resumed_run(start_iter)
            if self.run_id is None:
                name = run_name or os.path.basename(os.path.dirname(os.path.abspath(logdir))) or None
                self.run_id = self.client.create_run(experiment_id, run_name=name).info.run_id
        except MlflowException as exc:  # the store is there but refuses (auth, bad path, old server)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(URI_PATH, f"the MLflow tracking store {redact_text(tracking_uri)} failed: "
                              f"{redact_text(first)[:300]}") from None
        write_text(os.path.join(logdir, RUN_ID_FILE), self.run_id)
        self._pending = []
        self._closed = False
        log.info("mlflow: run %s in %s", self.run_id, redact_text(tracking_uri))

    def _resumed_run(self, start_iter):
        path = os.path.join(self.logdir, RUN_ID_FILE)
        if start_iter <= 0 or not os.path.exists(path):
            return None
        run_id = open(path, encoding="utf-8").read().strip()
        try:
            self.client.get_run(run_id)
        except Exception:  # deleted or another store: a new run
            return None
        self.client.update_run(run_id, status="RUNNING")
        return run_id

    # -- the writer interface -----------------------------------------------------------------
    def add_scalar(self, tag, value, step):
        from mlflow.entities import Metric

        self._pending.append(Metric(metric_key(tag), float(value), int(time.time() * 1000), int(step)))
        if len(self._pending) >= 1000:  # MLflow's log_batch limit
            self.flush()

    def add_scalars(self, main_tag, values, step):
        for k, v in values.items():
            self.add_scalar(f"{main_tag}/{k}", v, step)

    def flush(self):
        pending, self._pending = self._pending, []
        if pending:
            self.client.log_batch(self.run_id, metrics=pending)

    def close(self, timeout=None):
        if self._closed:
            return
        self.flush()
        self.client.set_terminated(self.run_id)
        self._closed = True

    # -- what only some writers take ------------------------------------------------------------
    def add_config(self, cfg):
        """The resolved config (already redacted by the caller), one param per leaf."""
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in flatten(cfg).items()]
        existing = self.client.get_run(self.run_id).data.params
        params = [p for p in params if p.key not in existing]  # a resumed run: params are write-once
        for start in range(0, len(params), 100):  # MLflow's log_batch limit on params
            self.client.log_batch(self.run_id, params=params[start:start + 100])

    def add_artifact(self, path, artifact_path=None):
        if os.path.exists(path):
            self.client.log_artifact(self.run_id, path, artifact_path)
