"""AMP on CUDA: float16 with a real GradScaler and bfloat16, resumed bitwise (about 30 s on an H100)."""
import pytest
import torch

from gpu_helpers import ckpt, cuda_cfg, probe
from test_train_e2e import assert_state_equal, train

pytestmark = pytest.mark.cuda


def amp_cfg(tmp_path, dtype, max_epoch):
    return cuda_cfg(tmp_path / f"probe-{dtype}-{max_epoch}.json", runtime={"amp": {"enable": True, "dtype": dtype, "force": True}},
                    trainer={"max_epoch": max_epoch, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.05, "momentum": 0.9}}})


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_amp_training_resumes_bitwise_with_the_scaler_state(tmp_path, run_up, dtype):
    if dtype == "bfloat16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip("this GPU has no native bfloat16")
    straight, res = train(run_up, tmp_path, f"straight-{dtype}", amp_cfg(tmp_path, dtype, 3))
    assert f"runs {dtype} autocast" in res.stdout  # the precision decision: native on this GPU
    assert probe(tmp_path / f"probe-{dtype}-3.json")["device"].startswith("cuda")
    half, _ = train(run_up, tmp_path, f"half-{dtype}", amp_cfg(tmp_path, dtype, 1))
    resumed, _ = train(run_up, tmp_path, f"half-{dtype}", amp_cfg(tmp_path, dtype, 3), "--resume",
                       half / "checkpoints" / "ckpt_e1.pth")
    a, b = ckpt(straight / "checkpoints" / "ckpt_e3.pth"), ckpt(resumed / "checkpoints" / "ckpt_e3.pth")
    assert a["iter"] == b["iter"] == 18  # 96 images / 16 per batch, 3 epochs
    assert_state_equal(a["model"], b["model"])
    assert_state_equal(a["optimizer"], b["optimizer"])
    assert_state_equal(a["scaler"], b["scaler"])
    if dtype == "float16":
        scaler = a["scaler"]
        # a live dynamic scaler: it has halved its scale on an overflow or counted finite steps
        assert scaler["scale"] > 0 and (scaler["scale"] != 65536.0 or scaler["_growth_tracker"] > 0), scaler
    else:
        assert a["scaler"] is None  # bfloat16 needs no loss scaling
