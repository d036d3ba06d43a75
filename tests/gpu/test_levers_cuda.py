"""The speed levers on CUDA (about 90 s on an H100, most of it torch.compile)."""
import pytest
import torch

from gpu_helpers import ckpt, cuda_cfg, probe
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


def test_compiled_model_on_cuda_keeps_plain_keys_and_resumes(tmp_path, run_up):
    compiled = {"imports": ["tiny_net_plugin"], "compile": True, "deterministic": False}
    net = {"type": "tiny_convnet", "kwargs": {"num_classes": 10, "width": 32}}
    eager_dir, _ = train(run_up, tmp_path, "eager", cuda_cfg(tmp_path / "e.json", net=net, runtime={
        "imports": ["tiny_net_plugin"]}, trainer={"max_epoch": 2, "optimizer": SGD}))
    straight, res = train(run_up, tmp_path, "straight", cuda_cfg(tmp_path / "s.json", net=net, runtime=compiled,
                                                                trainer={"max_epoch": 2, "optimizer": SGD}))
    assert "torch.compile: default settings" in res.stdout
    half, _ = train(run_up, tmp_path, "half", cuda_cfg(tmp_path / "h.json", net=net, runtime=compiled,
                                                        trainer={"max_epoch": 1, "optimizer": SGD}))
    resumed, _ = train(run_up, tmp_path, "half", cuda_cfg(tmp_path / "h.json", net=net, runtime=compiled,
                                                           trainer={"max_epoch": 2, "optimizer": SGD}),
                       "--resume", half / "checkpoints" / "ckpt_e1.pth")
    eager, a, b = (ckpt(d / "checkpoints" / "ckpt_e2.pth") for d in (eager_dir, straight, resumed))
    assert list(eager["model"]) == list(a["model"]) == list(b["model"])
    for k, v in a["model"].items():
        torch.testing.assert_close(v, b["model"][k], rtol=1e-4, atol=1e-5)  # fused kernels: not bitwise
        torch.testing.assert_close(v.float(), eager["model"][k].float(), rtol=1e-2, atol=1e-3)
