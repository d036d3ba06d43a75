"""Two "nodes" on localhost (torchrun --nnodes 2, two processes each, gloo), through the
launch script users run on each node; the run then resumes on one node with half the
processes and twice the per-process batch, and ends with the weights of the uninterrupted
two-node run: the data order depends on (seed, epoch) only, not on the number of processes."""
import os
import socket
import subprocess

import torch

from conftest import REPO
from test_dist import child_env, dist_cfg, load

SCRIPT = os.path.join(REPO, "scripts", "dist_train.sh")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(cfg, work_dir, *extra):
    """dist_train.sh on node 0 and node 1 at once (2 processes each); their exit codes and output."""
    port = str(free_port())
    procs = [subprocess.Popen(["bash", SCRIPT, "2", cfg, "--work-dir", work_dir, *extra], cwd=REPO,
                              env=child_env(NNODES="2", NODE_RANK=str(node), MASTER_ADDR="127.0.0.1", PORT=port),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for node in (0, 1)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    return [p.returncode for p in procs], outs


def test_two_nodes_train_and_the_run_resumes_on_one_node(tmp_path):
    cfg = dist_cfg(tmp_path, "nodes", batch_size=8)
    codes, outs = two_nodes(cfg, tmp_path / "both", "--opts", "trainer.max_epoch=2")
    assert codes == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    both = tmp_path / "both" / "checkpoints"
    assert load(both / "ckpt_e2.pth")["iter"] == 8  # 128 samples / (4 ranks x 8) per step, 2 epochs

    # node 1 is gone: node 0 alone continues from the end of epoch 1, 2 processes x batch 16
    res = subprocess.run(["bash", SCRIPT, "2", cfg, "--work-dir", tmp_path / "one", "--resume", both / "ckpt_e1.pth",
                          "--opts", "dataset.batch_size=16", "trainer.max_epoch=2"], cwd=REPO, env=child_env(), capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "resumed from" in res.stdout + res.stderr
    a, b = load(both / "ckpt_e2.pth"), load(tmp_path / "one" / "checkpoints" / "ckpt_e2.pth")
    assert a["iter"] == b["iter"] == 8
    for k, v in a["model"].items():  # the same samples in the same order, summed in another grouping
        assert torch.allclose(v, b["model"][k], atol=1e-5, rtol=0), (k, (v - b["model"][k]).abs().max())
