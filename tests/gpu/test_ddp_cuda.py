"""DDP over NCCL on one GPU through ``--launch pytorch --ng 1`` (about 40 s on an H100)."""
import pytest
import torch

from gpu_helpers import ckpt, cuda_cfg, probe, train_cfg

pytestmark = pytest.mark.cuda


def test_ng1_trains_under_nccl_ddp_bitwise_as_a_plain_cuda_run(tmp_path):
    cfg = cuda_cfg(tmp_path / "probe.json", trainer={"max_epoch": 2, "optimizer": {
        "type": "SGD", "kwargs": {"lr": 0.05, "momentum": 0.9}}}, default_hooks={"best": None})
    train_cfg(tmp_path, "ddp", cfg, "--launch", "pytorch", "--ng", 1)
    facts = probe(tmp_path / "probe.json")
    assert (facts["backend"], facts["world_size"], facts["ddp"]) == ("nccl", 1, True), facts
    assert facts["device"] == "cuda:0"
    train_cfg(tmp_path, "plain", cfg)
    assert probe(tmp_path / "probe.json")["ddp"] is False
    ddp, plain = ckpt(tmp_path / "ddp" / "checkpoints" / "ckpt_e2.pth"), ckpt(tmp_path / "plain" / "checkpoints" / "ckpt_e2.pth")
    assert list(ddp["model"]) == list(plain["model"])  # saved without DDP's "module." prefix
    # a world of one: the all-reduce averages over one rank, deterministic kernels on both sides
    for k, v in plain["model"].items():
        assert torch.equal(v, ddp["model"][k]), (k, (v.float() - ddp["model"][k].float()).abs().max())
