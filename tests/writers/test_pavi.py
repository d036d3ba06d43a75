"""pavi writer against a real HTTP server on 127.0.0.1: delivery and its JSON, HTTP 500 retries,
a full queue, a server that is down, a slow server (training speed unaffected), the token."""
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
import yaml

from conftest import REPO, invoke, write_cfg
from up_trainer.writers.pavi import SCHEMA, PaviWriter

TOKEN = "tok-S3CRET-4c1d"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        st = self.server.state
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with st["lock"]:
            st["requests"].append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
            status = st["statuses"].pop(0) if st["statuses"] else 200
        st["received"].set()
        st["gate"].wait(10)
        time.sleep(st["delay"])
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    gate = threading.Event()
    gate.set()
    srv.state = {"lock": threading.Lock(), "requests": [], "statuses": [], "delay": 0.0, "gate": gate,
                 "received": threading.Event(), "url": f"http://127.0.0.1:{srv.server_port}/api/v1/scalars"}
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.state
    gate.set()
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def dead_url():
    """A port on 127.0.0.1 with nothing listening (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/api/v1/scalars"


@pytest.fixture
def warnings_logged():
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("up")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def scalars_of(requests):
    return [s for r in requests for s in r["body"]["scalars"]]


def test_batches_arrive_with_the_documented_json(server):
    w = PaviWriter(url=server["url"], project="proj", run_name="run-a", token=TOKEN, batch_size=10,
                   flush_interval=0.05)
    for i in range(25):
        w.add_scalar("train/loss", i * 0.5, i)
    w.add_scalar("train/grad_norm", float("nan"), 25)
    w.add_scalars("metrics", {"top1": 91.5, "top5": 99.0}, 2)
    w.close(timeout=10)
    assert w.sent == 28 and w.failed == 0 and w.dropped == 0
    reqs = server["requests"]
    assert all(len(r["body"]["scalars"]) <= 10 for r in reqs)
    assert [r["body"]["seq"] for r in reqs] == list(range(1, len(reqs) + 1))
    for r in reqs:
        assert r["path"] == "/api/v1/scalars"
        assert r["headers"]["Content-Type"] == "application/json"
        assert r["headers"]["Authorization"] == f"Bearer {TOKEN}"
        body = r["body"]
        assert set(body) == {"schema", "project", "run", "seq", "sent_at", "scalars"}
        assert (body["schema"], body["project"], body["run"]) == (SCHEMA, "proj", "run-a")
    got = scalars_of(reqs)
    assert [(s["tag"], s["step"], s["value"]) for s in got] == (
        [("train/loss", i, i * 0.5) for i in range(25)]
        + [("train/grad_norm", 25, "NaN"), ("metrics/top1", 2, 91.5), ("metrics/top5", 2, 99.0)])
    assert all(abs(s["time"] - time.time()) < 60 for s in got)
    assert TOKEN not in repr(w) and "127.0.0.1" in repr(w)


def test_http_500s_are_retried_with_the_same_batch(server):
    server["statuses"] += [500, 503]
    w = PaviWriter(url=server["url"], batch_size=100, flush_interval=0.05, backoff=0.01)
    for i in range(5):
        w.add_scalar("train/loss", float(i), i)
    assert w.flush(timeout=10)
    reqs = server["requests"]
    assert len(reqs) == 3 and w.retries == 2
    assert [r["body"]["seq"] for r in reqs] == [1, 1, 1]  # same seq: a server may drop duplicates
    assert reqs[0]["body"]["scalars"] == reqs[2]["body"]["scalars"]
    assert w.sent == 5 and w.failed == 0
    w.close()


def test_rejected_token_is_not_retried_nor_logged(server, warnings_logged, monkeypatch):
    server["statuses"] += [401]
    monkeypatch.setenv("UP_PAVI_URL", server["url"])
    monkeypatch.setenv("UP_PAVI_TOKEN", TOKEN)
    w = PaviWriter(batch_size=100, flush_interval=0.05, backoff=0.01)  # url and token from the environment
    for i in range(3):
        w.add_scalar("train/loss", float(i), i)
    w.close(timeout=5)
    assert len(server["requests"]) == 1 and w.failed == 3 and w.sent == 0
    assert server["requests"][0]["headers"]["Authorization"] == f"Bearer {TOKEN}"
    text = "\n".join(r.getMessage() for r in warnings_logged)
    assert "HTTP 401" in text and "UP_PAVI_TOKEN" in text
    assert TOKEN not in text


def test_full_queue_drops_oldest_with_a_counted_warning(server, warnings_logged):
    server["gate"].clear()  # the server holds the first request until released
    w = PaviWriter(url=server["url"], batch_size=5, queue_size=5, flush_interval=60)
    for i in range(5):
        w.add_scalar("x", float(i), i)
    assert server["received"].wait(10)  # batch 0-4 is in flight, stuck on the server
    for i in range(5, 25):
        w.add_scalar("x", float(i), i)
    assert w.dropped == 15
    server["gate"].set()
    w.close(timeout=10)
    assert [s["value"] for s in scalars_of(server["requests"])] == [0, 1, 2, 3, 4, 20, 21, 22, 23, 24]
    assert any("dropped 15 oldest scalars" in r.getMessage() for r in warnings_logged)


def test_server_down_never_blocks_or_raises(dead_url, warnings_logged):
    w = PaviWriter(url=dead_url, token=TOKEN, batch_size=50, flush_interval=0.01, max_retries=2, backoff=0.05)
    t0 = time.perf_counter()
    for i in range(1000):
        w.add_scalar("train/loss", float(i), i)
    spent = time.perf_counter() - t0
    t0 = time.perf_counter()
    w.close(timeout=1.0)
    closing = time.perf_counter() - t0
    assert spent < 0.5, spent  # ~1 µs per call: the HTTP work is on the background thread
    assert closing < 3.0, closing  # close() gives up at its timeout
    assert w.sent == 0 and w.failed + w.dropped == 1000 and w.warnings >= 1
    text = "\n".join(r.getMessage() for r in warnings_logged)
    assert "not delivered" in text and "ConnectionError" in text and TOKEN not in text


def _training_like_loop(writer, iters=15):
    """A small conv net's forward/backward/step per iteration (~10 ms of CPU) plus four
    scalars per iteration: what the logger sends with freq 1, its most talkative setting."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(32 * 16 * 16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 3, 16, 16), torch.randint(0, 10, (64,))
    t0, c0, in_writer = time.perf_counter(), time.process_time(), 0.0
    for i in range(iters):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if writer is not None:
            t = time.perf_counter()
            for k in range(4):
                writer.add_scalar(f"train/loss{k}", 0.5 + k, i)
            in_writer += time.perf_counter() - t
    return time.perf_counter() - t0, time.process_time() - c0, in_writer


HELD_SERVER = """
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
released = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), released.set()), daemon=True).start()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        print("held", flush=True)
        released.wait(120)
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
srv = ThreadingHTTPServer(("127.0.0.1", 0), H); srv.daemon_threads = True
print(srv.server_port, flush=True); srv.serve_forever()
"""


@pytest.fixture
def held_server():
    """A server that takes each post and answers it only when the test says so (a line on its
    stdin), in its own process; it prints "held" when a post has arrived and is being held."""
    proc = subprocess.Popen([sys.executable, "-c", HELD_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/api/v1/scalars", proc
    finally:
        proc.kill()
        proc.wait()


def test_held_server_never_blocks_training(held_server):
    """While the server holds the writer's post unanswered, the training loop runs to its end.
    No clock is read: a writer that waited for the server would still be waiting (the loop's
    thread would be alive when joined), however fast or loaded the machine is (a timed version
    of this check failed on a machine at load 20 with no fault in the writer)."""
    url, proc = held_server
    w = PaviWriter(url=url, batch_size=40, flush_interval=60)
    done = []
    loop = threading.Thread(target=lambda: done.append(_training_like_loop(w)), daemon=True)  # 60 scalars: one post
    loop.start()
    assert proc.stdout.readline().strip() == "held"  # the post reached the server, which holds it
    loop.join(timeout=120)
    try:
        assert done and not loop.is_alive(), "the training loop waited for the held post"
        assert w._seq == 1 and len(w._queue) == 20  # one batch in flight; the rest waits for a full batch
    finally:
        proc.stdin.write("release\n")
        proc.stdin.flush()
    assert w.flush(timeout=30)  # answered once released: nothing lost
    w.close(timeout=10)


# -- through the logger in a real (tiny) training run --------------------------------------------------
TINY = ["dataset.train.kwargs.subset=32", "dataset.test.kwargs.subset=16", "dataset.train.kwargs.size=8",
        "dataset.test.kwargs.size=8", "dataset.batch_size=8", "trainer.max_epoch=2", "runtime.num_threads=1",
        "default_hooks.best=null", "default_hooks.checkpoint=null"]


def train_with_pavi(tmp_path, url, *opts, **writer_kwargs):
    with open(os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["hooks"] = [{"type": "train_val_logger", "kwargs": {
        "freq": 2, "summary_writer": "pavi", "plot": False,
        "writer_kwargs": {"url": url, "project": "digits", "token": TOKEN, "flush_interval": 0.05, **writer_kwargs}}}]
    path = write_cfg(tmp_path / "pavi.yaml", cfg)
    t0 = time.perf_counter()
    res = invoke(["train", "--config", path, "--work-dir", tmp_path / "run", "--opts", *TINY, *opts])
    assert res.exit_code == 0, (res.stderr, res.exception, res.stdout[-3000:])
    with open(tmp_path / "run" / "train.log") as f:
        log_text = f.read()
    return res, log_text, time.perf_counter() - t0


def test_training_delivers_to_pavi(server, tmp_path):
    res, log_text, _ = train_with_pavi(tmp_path, server["url"])
    got = scalars_of(server["requests"])
    steps = lambda tag: [s["step"] for s in got if s["tag"] == tag]  # noqa: E731
    assert steps("train/loss") == [2, 4, 6, 8] and steps("train/lr") == [2, 4, 6, 8]
    assert steps("metrics/top1") == [1, 2]  # epoch steps
    assert {r["body"]["run"] for r in server["requests"]} == {"run"}  # default: the run dir's name
    assert TOKEN not in res.stdout and TOKEN not in log_text and TOKEN not in res.stderr


def test_training_survives_a_dead_server(dead_url, tmp_path):
    res, log_text, _ = train_with_pavi(tmp_path, dead_url, "trainer.max_epoch=1", max_retries=1, backoff=0.01,
                                       close_timeout=1.0)
    assert "pavi writer:" in log_text and "not delivered" in log_text
    with open(tmp_path / "run" / "metrics.csv") as f:
        assert len(f.read().splitlines()) == 1 + 2 + 1  # header, 2 train rows, 1 eval row
    assert TOKEN not in res.stdout and TOKEN not in log_text
