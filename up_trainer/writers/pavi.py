"""pavi writer: scalars POSTed as JSON batches to a pavi-compatible endpoint.

Built on requests, with one background thread: ``add_scalar`` only appends to a bounded
in-memory queue (drop-oldest when full), so a slow or dead server never blocks or breaks
training. Failed posts are retried with exponential backoff; what cannot be delivered is
counted and reported as warnings. The wire format is documented in docs/logging.rst (section "pavi writer").
The token travels only in the Authorization header and is never logged or shown in repr().
"""
import collections
import json
import logging
import math
import os
import threading
import time
from typing import Optional
from urllib.parse import urlsplit, urlunsplit

from ..config.redact import REDACTED
from ..errors import ConfigError
from ..registry import WRITERS

log = logging.getLogger("up")

SCHEMA = "up-pavi/1"
RETRY_STATUS = {408, 425, 429}  # plus every 5xx
WARN_EVERY_S = 30.0  # repeated warnings of one kind are merged into one line per interval


def safe_url(url):
    """The URL without user:password and query string, fit for a log line."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return "<invalid url>"


def without_credentials(url):
    """The URL without its user:password@ part (the rest, query included, unchanged)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _wire_number(v):
    # JSON has no NaN/Infinity; spell them as strings so a diverged loss still shows up.
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


@WRITERS.register("pavi")
class PaviWriter:
    """Scalars as JSON batches posted from a background thread (never blocks training)."""

    def __init__(self, logdir: Optional[str] = None, start_iter: int = 0, start_epoch: int = 0,
                 url: Optional[str] = None, project: str = "default", run_name: Optional[str] = None,
                 token: Optional[str] = None, batch_size: int = 200, queue_size: int = 10000,
                 flush_interval: float = 2.0, timeout: float = 10.0, max_retries: int = 5, backoff: float = 1.0,
                 max_backoff: float = 30.0, close_timeout: float = 10.0):
        self.validate_kwargs(dict(url=url, batch_size=batch_size, queue_size=queue_size,
                                  flush_interval=flush_interval, timeout=timeout, max_retries=max_retries,
                                  backoff=backoff, max_backoff=max_backoff, close_timeout=close_timeout))
        import requests  # noqa: F401  (fail here, in the main thread, when it is missing)

        self.url = url or os.environ["UP_PAVI_URL"]
        if token == REDACTED:  # a config.yaml written by an earlier run: the real token is not in it
            log.warning("pavi writer: writer_kwargs.token is %s (a run's saved config.yaml?): "
                        "using UP_PAVI_TOKEN instead", REDACTED)
            token = None
        self._token = token or os.environ.get("UP_PAVI_TOKEN") or None
        # requests turns user:password in a URL into Basic auth, which would replace the
        # Bearer header: with a token, the credentials are dropped from the URL posted to.
        self._post_url = without_credentials(self.url) if self._token else self.url
        self.project = project
        if run_name is None:  # the run directory's name for the default logdir "log"
            run_name = os.path.basename(os.path.dirname(os.path.abspath(logdir))) if logdir else "run"
        self.run_name = run_name or "run"
        self.batch_size, self.queue_size = batch_size, queue_size
        self.flush_interval, self.timeout = flush_interval, timeout
        self.max_retries, self.backoff, self.max_backoff = max_retries, backoff, max_backoff
        self.close_timeout = close_timeout
        # Counters, read by tests and the close() summary.
        self.sent = 0  # scalars delivered (HTTP 2xx)
        self.batches_sent = 0
        self.dropped = 0  # scalars dropped oldest-first because the queue was full
        self.failed = 0  # scalars in batches given up (retries exhausted, or rejected with 4xx)
        self.retries = 0
        self.warnings = 0  # warning lines logged
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._inflight = 0
        self._flush_requested = False
        self._closing = False
        self._closed = False
        self._deadline = None
        self._abort = threading.Event()  # set when close() gives up waiting
        self._seq = 0
        self._warned_at = {}
        self._reported_dropped = 0
        self._thread = threading.Thread(target=self._run, name="up-pavi-writer", daemon=True)
        self._thread.start()

    @staticmethod
    def validate_kwargs(kw):
        """ConfigErrors with paths relative to the writer kwargs; run before training starts."""
        url = kw.get("url") or os.environ.get("UP_PAVI_URL")
        if not url:
            raise ConfigError("url", "the pavi writer needs an endpoint",
                              "set writer_kwargs.url or the UP_PAVI_URL environment variable")
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise ConfigError("url", f"expected an http(s):// URL, got {safe_url(str(url))!r}")
        for key in ("batch_size", "queue_size"):
            if key in kw and kw[key] < 1:
                raise ConfigError(key, f"must be >= 1, got {kw[key]}")
        for key in ("flush_interval", "timeout", "backoff", "max_backoff", "close_timeout", "max_retries"):
            if key in kw and kw[key] < 0:
                raise ConfigError(key, f"must be >= 0, got {kw[key]}")
        if kw.get("timeout") == 0:
            raise ConfigError("timeout", "must be > 0")

    def __repr__(self):
        return (f"PaviWriter(url={safe_url(self.url)!r}, project={self.project!r}, run={self.run_name!r}, "
                f"token={'<set>' if self._token else None})")

    # -- the training thread's side: cheap and non-blocking ------------------------------------
    def add_scalar(self, tag, value, step):
        try:
            item = (str(tag), float(value), int(step), time.time())
        except (TypeError, ValueError):
            return  # not a number: nothing to send, and never an error in the training loop
        with self._cond:
            if self._closing:
                return
            if len(self._queue) >= self.queue_size:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(item)
            if len(self._queue) >= self.batch_size:
                self._cond.notify()

    def add_scalars(self, main_tag, values, step):
        for k, v in values.items():
            self.add_scalar(f"{main_tag}/{k}", v, step)

    def flush(self, timeout=0.0):
        """Ask the thread to send what is queued now. With ``timeout`` > 0, wait up to that
        long for the queue to drain (never used by the logger inside the training loop)."""
        with self._cond:
            self._flush_requested = True
            self._cond.notify_all()
            end = time.monotonic() + timeout
            while timeout > 0 and (self._queue or self._inflight) and self._thread.is_alive():
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return not (self._queue or self._inflight)

    def close(self, timeout=None):
        """Deliver what is queued within ``timeout`` seconds (default close_timeout), then stop."""
        timeout = self.close_timeout if timeout is None else timeout
        with self._cond:
            if self._closed:
                return
            self._closed = self._closing = True
            self._deadline = time.monotonic() + timeout
            self._cond.notify_all()
        self._thread.join(timeout)
        self._abort.set()  # a worker still retrying gives up at its next check
        self._thread.join(1.0)
        with self._cond:  # a batch still in flight is counted by the worker itself
            lost = len(self._queue)
            self._queue.clear()
        self.failed += lost
        self._report_drops(force=True)
        if self.failed:
            self._warn("summary", "pavi writer: %d scalars not delivered to %s (%d sent)",
                       self.failed, safe_url(self.url), self.sent, force=True)

    # -- the background thread -------------------------------------------------------------------
    def _run(self):
        try:
            import requests

            session = requests.Session()
            # Proxies from the environment resolved once; per-post environment and netrc
            # lookups would cost CPU in the training process on every batch.
            session.proxies.update(requests.utils.get_environ_proxies(self.url))
            session.trust_env = False
            while True:
                with self._cond:
                    end = time.monotonic() + self.flush_interval
                    while not (self._closing or self._flush_requested or len(self._queue) >= self.batch_size):
                        left = end - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    n = min(self.batch_size, len(self._queue))
                    batch = [self._queue.popleft() for _ in range(n)]
                    self._inflight = n
                    self._flush_requested = self._flush_requested and bool(self._queue)
                    closing = self._closing
                self._report_drops()
                if batch:
                    self._deliver(session, batch)
                with self._cond:
                    self._inflight = 0
                    self._cond.notify_all()
                    if closing and not self._queue:
                        break
                if self._abort.is_set():
                    break
            session.close()
        except Exception as exc:  # a bug here must not take training down: report, stop sending
            self._warn("crash", "pavi writer stopped: %s: %s", type(exc).__name__, exc, force=True)

    def _deliver(self, session, batch):
        self._seq += 1
        body = json.dumps({
            "schema": SCHEMA,
            "project": self.project,
            "run": self.run_name,
            "seq": self._seq,
            "sent_at": time.time(),
            "scalars": [{"tag": t, "step": s, "value": _wire_number(v), "time": ts} for t, v, s, ts in batch],
        }, allow_nan=False)
        headers = {"Content-Type": "application/json", "User-Agent": "up-trainer-pavi/1"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        attempt = 0
        while True:
            status, error = None, None
            try:
                r = session.post(self._post_url, data=body, headers=headers, timeout=self._request_timeout())
                status = r.status_code
                r.close()
            except Exception as exc:  # refused, reset, timed out...: all retryable
                error = type(exc).__name__  # not str(exc): it may quote the URL with credentials
            if status is not None and 200 <= status < 300:
                self.sent += len(batch)
                self.batches_sent += 1
                return
            reason = error or f"HTTP {status}"
            retryable = status is None or status in RETRY_STATUS or status >= 500
            delay = min(self.backoff * 2 ** attempt, self.max_backoff)
            if not retryable or attempt >= self.max_retries or not self._may_wait(delay):
                self.failed += len(batch)
                hint = " (check the token / UP_PAVI_TOKEN)" if status in (401, 403) else ""
                self._warn("failed", "pavi writer: %d scalars not delivered to %s after %d attempt(s): %s%s; "
                           "%d lost so far", len(batch), safe_url(self.url), attempt + 1, reason, hint, self.failed)
                return
            self.retries += 1
            attempt += 1
            self._abort.wait(delay)

    def _request_timeout(self):
        if self._deadline is None:
            return self.timeout
        return max(0.1, min(self.timeout, self._deadline - time.monotonic()))

    def _may_wait(self, delay):
        if self._abort.is_set():
            return False
        return self._deadline is None or time.monotonic() + delay < self._deadline

    def _report_drops(self, force=False):
        if self.dropped > self._reported_dropped:
            if self._warn("dropped", "pavi writer: queue full (%d), dropped %d oldest scalars so far",
                          self.queue_size, self.dropped, force=force):
                self._reported_dropped = self.dropped

    def _warn(self, kind, msg, *args, force=False):
        now = time.monotonic()
        last = self._warned_at.get(kind)
        if not force and last is not None and now - last < WARN_EVERY_S:
            return False
        self._warned_at[kind] = now
        self.warnings += 1
        log.warning(msg, *args)
        return True
