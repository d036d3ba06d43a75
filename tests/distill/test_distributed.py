"""Distillation under DDP (2 gloo ranks on CPU): only the student and its adapter are wrapped,
each rank runs its own frozen teacher on its own half batch, and the run matches one process
with the doubled batch."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO, SUBPROCESS_PATH, invoke, write_cfg
from test_training import kd_cfg

VENV_BIN = os.path.dirname(sys.executable)


def cfg_file(tmp_path, name, batch_size):
    cfg = kd_cfg(tmp_path, runtime={"seed": 3, "imports": ["dist_plugin"], "dist_timeout": 30},
                 dataset={"train": {"type": "digits", "kwargs": {"split": "train", "subset": 64}},
                          "test": {"type": "digits", "kwargs": {"split": "test", "subset": 16}},
                          "batch_size": batch_size, "test_batch_size": 8},
                 trainer={"max_epoch": 1, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9}}},
                 default_hooks={"insight": None})
    return write_cfg(tmp_path / f"{name}.yaml", cfg)


@pytest.mark.slow
def test_two_gloo_ranks_with_a_teacher_equal_one_rank_with_the_doubled_batch(tmp_path):
    single = tmp_path / "single"
    res = invoke(["train", "--config", cfg_file(tmp_path, "one", 16), "--work-dir", single])
    assert res.exit_code == 0, (res.stderr, res.exception)
    env = dict(os.environ, PYTHONPATH=SUBPROCESS_PATH, OMP_NUM_THREADS="1",
               TORCHRUN=os.path.join(VENV_BIN, "torchrun"))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    two = tmp_path / "two"
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "dist_train.sh"), "2",
                           cfg_file(tmp_path, "two", 8), "--work-dir", str(two)],
                          capture_output=True, text=True, timeout=400, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "distill: 2 teacher(s)" in proc.stdout + proc.stderr
    a = torch.load(single / "checkpoints" / "ckpt_e1.pth", weights_only=True)
    b = torch.load(two / "checkpoints" / "ckpt_e1.pth", weights_only=True)
    assert a["iter"] == b["iter"] == 4
    assert sorted(a["model"]) == sorted(b["model"])  # student + adapter, no teacher, no DDP prefix
    assert any(k.startswith("distill_adapters.") for k in b["model"])
    for k, v in a["model"].items():
        assert torch.allclose(v, b["model"][k], atol=1e-5, rtol=0), (k, (v - b["model"][k]).abs().max())
