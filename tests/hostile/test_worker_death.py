"""A DataLoader worker killed by a real SIGKILL (what the kernel's out-of-memory killer sends)
in the middle of a run: one line naming the worker, the signal and the likely cause, on the
terminal and in train.log, after the snapshot of the last update was written; exit 1."""
import os
import signal

import torch

from hostile_helpers import ProcResult, assert_one_line
from test_process import cfg_file, start, wait_file


def children(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    return sorted(found)


def test_a_worker_killed_mid_run_is_one_line_with_the_snapshot_written(tmp_path):
    marker = tmp_path / "gate"
    cfg = cfg_file(tmp_path, "oom", max_epoch=2,
                   hooks=[{"type": "test_gate", "kwargs": {"at": [1], "marker": str(marker), "timeout": 60}}],
                   dataset={"num_workers": 2})
    proc = start(cfg, tmp_path / "run")
    wait_file(f"{marker}.i1", proc)  # iteration 1 is done; the run waits at its boundary
    workers = children(proc.pid)
    assert len(workers) == 2, workers
    os.kill(workers[1], signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    line = assert_one_line(ProcResult(proc.returncode, out, err), code=1)
    ckpts = tmp_path / "run" / "checkpoints"
    assert line.startswith(f"up: error: DataLoader worker 1 (pid {workers[1]}) was killed by SIGKILL, most likely "
                           "the kernel's out-of-memory killer"), line
    assert f"training stopped at epoch 1 iteration 1; the newest checkpoint is {ckpts / 'ckpt_latest.pth'}" in line
    log = (tmp_path / "run" / "train.log").read_text()
    assert line[len("up: error: "):] in log and "Traceback" not in log
    snap = torch.load(ckpts / "ckpt_e1-i1.pth", map_location="cpu", weights_only=True)
    assert snap["iter"] == 1
    assert os.path.samefile(ckpts / "ckpt_latest.pth", ckpts / "ckpt_e1-i1.pth")
