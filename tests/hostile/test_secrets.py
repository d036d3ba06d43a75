"""Secrets in a config never reach a file or a log: config.yaml in the run dir, every
checkpoint's stored config, train.log, the console, `up config`, error messages. The run
itself still uses them: the pavi server gets the real token as a Bearer header, and
credentials in its URL do not replace it."""
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from conftest import invoke
from hostile_helpers import assert_one_line, seed_checkpoint, fingerprint, tiny_cfg, write_yaml

YAML_TOKEN = "yaml-T0KEN-91fe"
OPTS_TOKEN = "opts-T0KEN-77ab"
URL_PASSWORD = "url-PASSW0RD-3c"
SECRETS = (YAML_TOKEN, OPTS_TOKEN, URL_PASSWORD)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.auth.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def pavi_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.auth = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def logger_with(url, **writer_kwargs):
    return {"type": "train_val_logger", "kwargs": {
        "freq": 1, "summary_writer": "pavi", "plot": False, "progress_bar": False,
        "writer_kwargs": {"url": url, "flush_interval": 0.05, **writer_kwargs}}}


def test_tokens_reach_the_server_and_no_file(tmp_path, pavi_server, monkeypatch):
    url = f"http://user:{URL_PASSWORD}@127.0.0.1:{pavi_server.server_port}/api/v1/scalars"
    cfg = tiny_cfg(hooks=[logger_with(url, token=YAML_TOKEN)])
    cfg["runtime"]["num_threads"] = 1
    run_dir = tmp_path / "run"
    args = ["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", str(run_dir),
            "--opts", f"hooks.train_val_logger.kwargs.writer_kwargs.token={OPTS_TOKEN}"]
    monkeypatch.setattr("sys.argv", ["up", *args])  # config.yaml records the command line
    res = invoke(args)
    assert res.exit_code == 0, (res.stderr, res.exception)
    # the run used the real token (the one --opts gave), as a Bearer header, not the URL's Basic auth
    assert pavi_server.auth and set(pavi_server.auth) == {f"Bearer {OPTS_TOKEN}"}
    written = {"console": res.stdout + res.stderr}
    for name in ("config.yaml", "train.log", "metrics.csv", "metrics.jsonl"):
        written[name] = (run_dir / name).read_text()
    ckpts = sorted(n for n in os.listdir(run_dir / "checkpoints") if n.endswith(".pth"))  # not the .up.lock
    assert "ckpt_e1.pth" in ckpts
    for name in ckpts:
        stored = torch.load(run_dir / "checkpoints" / name, map_location="cpu", weights_only=True)["config"]
        written[name] = json.dumps(stored)
        kwargs = stored["hooks"][0]["kwargs"]["writer_kwargs"]
        assert kwargs["token"] == "<redacted>" and kwargs["url"].startswith("http://user:<redacted>@127.0.0.1")
    for where, text in written.items():
        for secret in SECRETS:
            assert secret not in text, (secret, where)
    assert "token: <redacted>" in written["config.yaml"]
    assert "writer_kwargs.token=<redacted>" in written["config.yaml"]  # the recorded command line


def test_token_from_the_environment_is_used_and_never_written(tmp_path, pavi_server, monkeypatch):
    """Held before: the writer reads UP_PAVI_URL / UP_PAVI_TOKEN, and neither reaches a file."""
    env_token = "env-T0KEN-5e5e"
    monkeypatch.setenv("UP_PAVI_URL", f"http://127.0.0.1:{pavi_server.server_port}/api/v1/scalars")
    monkeypatch.setenv("UP_PAVI_TOKEN", env_token)
    cfg = tiny_cfg(hooks=[{"type": "train_val_logger", "kwargs": {
        "freq": 1, "summary_writer": "pavi", "plot": False, "progress_bar": False,
        "writer_kwargs": {"flush_interval": 0.05}}}])
    run_dir = tmp_path / "run"
    res = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", run_dir])
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert pavi_server.auth and set(pavi_server.auth) == {f"Bearer {env_token}"}
    texts = [res.stdout, res.stderr] + [p.read_bytes().decode("latin-1") for p in run_dir.rglob("*") if p.is_file()]
    assert not [t for t in texts if env_token in t]


def test_up_config_prints_secrets_redacted(tmp_path):
    cfg = tiny_cfg(hooks=[logger_with("https://u:" + URL_PASSWORD + "@pavi.example/x", token=YAML_TOKEN)])
    res = invoke(["config", "--config", write_yaml(tmp_path / "cfg.yaml", cfg)])
    assert res.exit_code == 0, res.stderr
    assert YAML_TOKEN not in res.stdout and URL_PASSWORD not in res.stdout
    assert "token: <redacted>" in res.stdout and "https://u:<redacted>@pavi.example/x" in res.stdout


def test_a_mistyped_token_is_not_quoted_in_the_error(tmp_path):
    run_dir = tmp_path / "run"
    before = seed_checkpoint(run_dir / "checkpoints")
    cfg = tiny_cfg(hooks=[logger_with("https://pavi.example/x", token=918273645)])
    res = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", run_dir])
    line = assert_one_line(res, "writer_kwargs.token: expected", "got int")
    assert "918273645" not in line
    assert fingerprint(run_dir / "checkpoints") == before


def test_a_saved_config_with_a_redacted_token_falls_back_to_the_environment(pavi_server, monkeypatch):
    from up_trainer.writers.pavi import PaviWriter

    monkeypatch.setenv("UP_PAVI_TOKEN", OPTS_TOKEN)
    w = PaviWriter(url=f"http://127.0.0.1:{pavi_server.server_port}/x", token="<redacted>", flush_interval=0.01)
    w.add_scalar("train/loss", 1.0, 1)
    w.close(timeout=5)
    assert pavi_server.auth == [f"Bearer {OPTS_TOKEN}"]
