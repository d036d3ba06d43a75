"""Secrets in URLs, parsed as URLs: a password holding '@', credentials in the query string,
and the places the old key-name redaction never reached (the log, error lines, tracebacks, an
unreachable MLflow server)."""
import json
import logging
import os
import socket
import subprocess
import sys

import pytest
import torch

from conftest import REPO, invoke
from hostile_helpers import assert_one_line, tiny_cfg, write_yaml
from test_secrets import logger_with, pavi_server  # noqa: F401  (fixture)

AT_PASSWORD = "p@ssAT99-x"
QUERY_SECRETS = {"token": "qTOKEN-4411", "sig": "qSIG-5522", "access_key": "qACCESS-6633",
                 "X-Amz-Signature": "qAMZSIG-7744", "X-Amz-Credential": "qAMZCRED-8855"}
SECRETS = (AT_PASSWORD, "ssAT99", *QUERY_SECRETS.values())


def secret_url(port):
    query = "&".join(f"{k}={v}" for k, v in QUERY_SECRETS.items())
    return f"http://alice:{AT_PASSWORD}@127.0.0.1:{port}/api/v1/scalars?project=p&{query}"


def written_texts(run_dir, result):
    texts = {"console": result.stdout + result.stderr}
    for name in ("config.yaml", "train.log"):
        texts[name] = (run_dir / name).read_text()
    for name in sorted(n for n in os.listdir(run_dir / "checkpoints") if n.endswith(".pth")):
        ckpt = torch.load(run_dir / "checkpoints" / name, map_location="cpu", weights_only=True)
        texts[name] = json.dumps(ckpt["config"])
    return texts


def test_at_in_password_and_query_credentials_reach_no_file(tmp_path, pavi_server):  # noqa: F811
    cfg = tiny_cfg(hooks=[logger_with(secret_url(pavi_server.server_port), token="yaml-T0KEN-1234")])
    run_dir = tmp_path / "run"
    res = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", run_dir])
    assert res.exit_code == 0, (res.stderr, res.exception)
    texts = written_texts(run_dir, res)
    assert "ckpt_e1.pth" in texts
    for where, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, (secret, where)
    stored = texts["config.yaml"]
    assert "http://alice:<redacted>@127.0.0.1:" in stored and "?project=p&token=<redacted>&sig=<redacted>" in stored
    assert "X-Amz-Signature=<redacted>&X-Amz-Credential=<redacted>" in stored


def test_error_line_quoting_a_url_redacts_it(tmp_path):
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run", "--resume",
                  f"http://alice:{AT_PASSWORD}@files.example/ckpt.pth?sig=qSIG-5522"])
    line = assert_one_line(res, "--resume: checkpoint not found: http://alice:<redacted>@files.example/ckpt.pth"
                           "?sig=<redacted>")
    assert "ssAT99" not in line and "qSIG" not in line


def test_log_lines_are_redacted_in_train_log_and_console(tmp_path, capsys):
    from up_trainer.run import setup_logging

    setup_logging(str(tmp_path))
    try:
        logging.getLogger("up").info("connecting to %s", f"https://bob:{AT_PASSWORD}@h.example/x?api_key=qKEY-9966")
    finally:
        for handler in list(logging.getLogger("up").handlers):
            logging.getLogger("up").removeHandler(handler)
            handler.close()
    text = (tmp_path / "train.log").read_text() + capsys.readouterr().out
    assert "https://bob:<redacted>@h.example/x?api_key=<redacted>" in text
    assert "ssAT99" not in text and "qKEY-9966" not in text


def test_a_traceback_python_prints_is_redacted(tmp_path):
    """An unexpected exception (a bug, exit 1) is printed by Python itself: still redacted."""
    code = ("from up_trainer.exits import run_safely\n"
            "@run_safely\n"
            "def boom():\n"
            f"    raise RuntimeError('request to https://carol:{AT_PASSWORD}@h.example/?token=qTOKEN-4411 failed')\n"
            "boom()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert "https://carol:<redacted>@h.example/?token=<redacted> failed" in proc.stderr, proc.stderr
    assert "ssAT99" not in proc.stderr and "qTOKEN" not in proc.stderr


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_unreachable_mlflow_server_is_one_line_without_the_password(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    # without the fix MLflow itself gives up: keep its retries short so that takes seconds
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    uri = f"http://alice:{AT_PASSWORD}@127.0.0.1:{closed_port()}/?token=qTOKEN-4411"
    cfg = tiny_cfg(hooks=[{"type": "train_val_logger", "kwargs": {
        "freq": 1, "summary_writer": "mlflow", "plot": False, "progress_bar": False,
        "writer_kwargs": {"tracking_uri": uri}}}])
    run_dir = tmp_path / "run"
    res = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", run_dir])
    line = assert_one_line(res, "train_val_logger.writer_kwargs.tracking_uri: cannot reach the MLflow tracking "
                           "server http://alice:<redacted>@127.0.0.1:", "?token=<redacted>")
    texts = [res.stdout, line] + [p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file()
                                  and p.suffix in (".yaml", ".log")]
    assert not [t for t in texts if "ssAT99" in t or "qTOKEN" in t]
