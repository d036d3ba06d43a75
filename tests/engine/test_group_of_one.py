"""``--launch pytorch --ng 1``: one process that is a DDP group of one (gloo here, NCCL on a GPU:
tests/gpu/test_ddp_cuda.py), training exactly as a plain run."""
import json

import torch

from conftest import tiny_cfg, write_cfg
from test_dist import child_env, load, run, up_cmd


def test_ng1_is_a_ddp_group_of_one_with_the_plain_runs_weights(tmp_path, run_up):
    # one thread in both runs: the DDP child gets OMP_NUM_THREADS=1, and a matmul split over two
    # threads may round differently from one on some CPUs
    cfg = tiny_cfg(runtime={"seed": 3, "imports": ["probe_plugin", "dist_plugin"], "device": "cpu", "num_threads": 1},
                   net={"type": "dist_mlp", "kwargs": {}},
                   trainer={"max_epoch": 1, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.05, "momentum": 0.9}}},
                   hooks=[{"type": "test_probe", "kwargs": {"path": str(tmp_path / "probe.json")}}],
                   default_hooks={"best": None})
    path = write_cfg(tmp_path / "cfg.yaml", cfg)
    res = run(up_cmd("--config", path, "--work-dir", tmp_path / "ddp", "--launch", "pytorch", "--ng", 1), env=child_env())
    assert res.returncode == 0, res.stderr[-3000:]
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert (probe["backend"], probe["world_size"], probe["ddp"]) == ("gloo", 1, True)
    res = run_up(["train", "--config", path, "--work-dir", tmp_path / "plain"])
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert json.loads((tmp_path / "probe.json").read_text())["ddp"] is False
    ddp, plain = load(tmp_path / "ddp" / "checkpoints" / "ckpt_e1.pth"), load(tmp_path / "plain" / "checkpoints" / "ckpt_e1.pth")
    assert list(ddp["model"]) == list(plain["model"])  # no "module." prefix
    for k, v in plain["model"].items():
        assert torch.equal(v, ddp["model"][k]), k
