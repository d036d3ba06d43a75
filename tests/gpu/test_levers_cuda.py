"""The speed levers on CUDA (about 90 s on an H100, most of it torch.compile)."""
import pytest
import torch

from gpu_helpers import ckpt, cuda_cfg, probe, train_cfg
from test_speed_levers import AUGMENTED
from test_train_e2e import assert_state_equal, train

pytestmark = pytest.mark.cuda

SGD = {"type": "SGD", "kwargs": {"lr": 0.05, "momentum": 0.9}}


def lever_cfg(tmp_path, name, max_epoch, **runtime):
    return cuda_cfg(tmp_path / f"{name}.json", runtime={"amp": {"enable": True, "dtype": "bfloat16"}, **runtime},
                    dataset={"train": AUGMENTED, "num_workers": 2, "pin_memory": True, "persistent_workers": True,
                             "prefetch_factor": 4},
                    trainer={"max_epoch": max_epoch, "optimizer": SGD})


def test_channels_last_pinned_workers_resume_bitwise(tmp_path, run_up):
    straight, _ = train(run_up, tmp_path, "straight", lever_cfg(tmp_path, "straight", 3, channels_last=True))
    facts = probe(tmp_path / "straight.json")
    assert facts["channels_last"] is True and facts["pin_memory"] is True and facts["device"].startswith("cuda")
    half, _ = train(run_up, tmp_path, "half", lever_cfg(tmp_path, "half", 1, channels_last=True))
    resumed, _ = train(run_up, tmp_path, "half", lever_cfg(tmp_path, "half", 3, channels_last=True), "--resume",
                       half / "checkpoints" / "ckpt_e1.pth")
    a, b = ckpt(straight / "checkpoints" / "ckpt_e3.pth"), ckpt(resumed / "checkpoints" / "ckpt_e3.pth")
    assert_state_equal(a["model"], b["model"])
    assert_state_equal(a["optimizer"], b["optimizer"])


def test_cudnn_benchmark_is_set_and_training_runs(tmp_path, run_up):
    cfg = lever_cfg(tmp_path, "bench", 3, cudnn_benchmark=True, channels_last=True, deterministic=False)
    run_dir, res = train(run_up, tmp_path, "bench", cfg)
    assert probe(tmp_path / "bench.json")["cudnn_benchmark"] is True
    torch.backends.cudnn.benchmark = False  # in-process runs share the flag
    first, last = (ckpt(run_dir / "checkpoints" / f"ckpt_e{e}.pth")["model"] for e in (1, 3))
    assert all(torch.isfinite(v.float()).all() for v in last.values())
    assert any(not torch.equal(first[k], last[k]) for k in last)  # it trained on


def test_compiled_model_on_cuda_keeps_plain_keys_and_resumes(tmp_path):
    """Fresh processes, as users run it: a compiled run right after a deterministic one in the
    same process failed with a MemoryError on CPU (torch's deterministic mode stays on)."""
    net = {"type": "tiny_convnet", "kwargs": {"num_classes": 10, "width": 32}}

    def cfg(name, max_epoch, compiled=True):
        runtime = {"compile": True, "deterministic": False} if compiled else {}
        return cuda_cfg(tmp_path / f"{name}.json", net=net, runtime=runtime, imports=["tiny_net_plugin"],
                        trainer={"max_epoch": max_epoch, "optimizer": SGD})

    train_cfg(tmp_path, "eager", cfg("eager", 2, compiled=False))
    res = train_cfg(tmp_path, "straight", cfg("straight", 2))
    assert "torch.compile: default settings" in res.stdout
    train_cfg(tmp_path, "half", cfg("half", 1))
    train_cfg(tmp_path, "half", cfg("half", 2), "--resume", tmp_path / "half" / "checkpoints" / "ckpt_e1.pth")
    eager, a, b = (ckpt(tmp_path / d / "checkpoints" / "ckpt_e2.pth") for d in ("eager", "straight", "half"))
    assert list(eager["model"]) == list(a["model"]) == list(b["model"])
    for k, v in a["model"].items():
        torch.testing.assert_close(v, b["model"][k], rtol=1e-4, atol=1e-5)  # fused kernels: not bitwise
        torch.testing.assert_close(v.float(), eager["model"][k].float(), rtol=1e-2, atol=1e-3)
