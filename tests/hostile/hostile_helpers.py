"""Shared by the hostile-input tests: a tiny trained run to attack, and the three assertions
every case makes (exit code, one stderr line, no checkpoint lost)."""
import hashlib
import os
import shutil
import threading
import time
from contextlib import contextmanager

import pytest
import yaml

from conftest import invoke
from optim_helpers import digits_cfg  # noqa: F401  (registers test_mlp / test_cnn)


def tiny_cfg(**sections):
    """test_mlp on 32 digits, batch 16: two iterations per epoch, one epoch, no logger."""
    net = sections.pop("net", None)
    cfg = digits_cfg(train_subset=32, test_subset=16, max_epoch=1, **sections)
    if net is not None:
        cfg["net"] = net
    return cfg


def write_yaml(path, cfg):
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    return str(path)


def fingerprint(save_dir):
    """{name: sha256} of every checkpoint file in save_dir."""
    out = {}
    if os.path.isdir(save_dir):
        for name in sorted(os.listdir(save_dir)):
            if name.endswith(".pth"):
                with open(os.path.join(save_dir, name), "rb") as f:
                    out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def assert_one_line(result, *fragments, code=2):
    """Exit ``code``, stderr exactly one ``up: error:`` line holding every fragment, no traceback."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == code, (result.exit_code, result.stderr, result.exception)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("up: error: "), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A finished one-epoch run: (work_dir, config path); copy it before attacking it."""
    work = tmp_path_factory.mktemp("trained")
    cfg = write_yaml(work / "cfg.yaml", tiny_cfg())
    result = invoke(["train", "--config", cfg, "--work-dir", work])
    assert result.exit_code == 0, (result.stderr, result.exception)
    return work, cfg


def copy_run(trained_run, dest):
    """A private copy of the trained run's checkpoints under ``dest``; returns its save_dir."""
    work, _ = trained_run
    shutil.copytree(work / "checkpoints", dest / "checkpoints")
    return dest / "checkpoints"


def moved_aside(run_dir):
    """The save_dir of the run ``--fresh`` moved aside in ``run_dir`` (its one replaced-* folder)."""
    moved = [d for d in os.listdir(run_dir) if d.startswith("replaced-")]
    assert len(moved) == 1, os.listdir(run_dir)
    return os.path.join(run_dir, moved[0], "checkpoints")


def seed_checkpoint(save_dir):
    """A checkpoint an earlier run left (a stand-in): whatever the attack, it stays as it is.
    Returns the fingerprint to compare with afterwards."""
    import torch

    os.makedirs(save_dir, exist_ok=True)
    torch.save({"model": {"w": torch.arange(4.0)}, "epoch": 1}, os.path.join(save_dir, "ckpt_e1.pth"))
    return fingerprint(save_dir)


class ProcResult:
    """A finished subprocess seen like the in-process CLI result, for assert_one_line."""

    def __init__(self, returncode, stdout, stderr):
        self.exit_code, self.stdout, self.stderr, self.exception = returncode, stdout or "", stderr or "", None


@contextmanager
def fifo(path, release_after=5.0):
    """A FIFO at ``path``. Opening one to read blocks until a writer comes; so that code which
    (wrongly) waits on it fails the test instead of hanging it, a writer opens and closes it
    for every reader found after ``release_after`` seconds (the reader then sees end of file)."""
    os.mkfifo(path)
    stop = threading.Event()

    def release():
        if stop.wait(release_after):
            return
        while not stop.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while nobody reads
            except OSError:
                time.sleep(0.05)
                continue
            os.close(fd)

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()
