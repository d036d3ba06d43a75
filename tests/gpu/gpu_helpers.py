"""Shared by tests/gpu/: configs that train on CUDA, runs in this process or in a subprocess,
and what the ``test_probe`` hook recorded.

Measured on one H100 (2026-11-27, torch 2.11): ``python -m pytest tests/gpu -q -n 7 --dist load``
took 108 s; per test: test_levers_cuda's compile case 85 s (fresh processes), the FCOS demo 72 s,
test_ddp_cuda 32 s, the cls demo 26 s, the others 7-10 s each.
"""
import json
import os
import re
import subprocess
import sys

import torch

from conftest import REPO, SUBPROCESS_PATH, tiny_cfg, write_cfg

# Deterministic cuBLAS needs a fixed workspace, chosen before the first CUDA matmul of this
# process (runtime.deterministic sets the same default for `up train`).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def cuda_cfg(probe_path, *, imports=(), hooks=(), **sections):
    """tiny_cfg on CUDA, deterministic, with the probe hook writing to ``probe_path``."""
    runtime = {"seed": 3, "device": "cuda", "deterministic": True,
               "imports": ["probe_plugin", *imports], **sections.pop("runtime", {})}
    probe = {"type": "test_probe", "kwargs": {"path": str(probe_path)}}
    return tiny_cfg(runtime=runtime, hooks=[*hooks, probe], **sections)


def probe(path):
    with open(path) as f:
        return json.load(f)


def child_env():
    env = dict(os.environ, PYTHONPATH=SUBPROCESS_PATH)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def up_subprocess(*args, timeout=300):
    """``up train ARGS`` in a fresh process (its own CUDA context, NCCL group, cuBLAS workspace)."""
    cmd = [sys.executable, "-m", "up_trainer", "train", *map(str, args)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=child_env())
    assert res.returncode == 0, res.stderr[-4000:]
    return res


def train_cfg(tmp_path, name, cfg, *extra, timeout=300):
    path = write_cfg(tmp_path / f"{name}.yaml", cfg)
    return up_subprocess("--config", path, "--work-dir", tmp_path / name, *extra, timeout=timeout)


def last_metric(text, name):
    """The value of ``name`` in the last ``eval epoch`` log line of ``text``."""
    lines = [line for line in text.splitlines() if "eval epoch" in line]
    assert lines, text[-3000:]
    match = re.search(rf"(?:^|\s){re.escape(name)}=([-0-9.]+)", lines[-1])
    assert match, lines[-1]
    return float(match.group(1))


def ckpt(path):
    return torch.load(path, map_location="cpu", weights_only=True)
