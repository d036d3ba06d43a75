"""2:4 sparsity on CUDA: a 2:4 sparse run trains and resumes bitwise on the GPU, and the masked
Linear layers swap to ``torch.sparse.to_sparse_semi_structured`` (compute capability 8.0 or
newer, float16) and compute what the dense zero-filled weights compute."""
import pytest
import torch
from torch import nn

from gpu_helpers import ckpt, cuda_cfg
from test_train_e2e import assert_state_equal, train
from up_trainer.sparsity.masks import apply_masks, is_semi_structured, semi_structured_mask, to_semi_structured

pytestmark = pytest.mark.cuda


def test_2_4_run_on_cuda_resumes_bitwise_and_stays_2_4(tmp_path, run_up):
    def cfg(epochs):
        return cuda_cfg(tmp_path / f"probe-{epochs}.json", sparsity={"scheduler": "semi_structured"},
                        trainer={"max_epoch": epochs})

    straight, _ = train(run_up, tmp_path, "straight", cfg(3))
    resumed, _ = train(run_up, tmp_path, "resumed", cfg(3), "--resume", straight / "checkpoints" / "ckpt_e1.pth")
    a, b = ckpt(straight / "checkpoints" / "ckpt_e3.pth"), ckpt(resumed / "checkpoints" / "ckpt_e3.pth")
    assert_state_equal(a["model"], b["model"])
    for name, mask in a["hooks"]["sparsity"]["masks"].items():
        assert torch.equal(a["model"][f"{name}.weight"].cpu() != 0, mask) and is_semi_structured(mask, 4, 2)


def test_masked_linear_layers_run_as_semi_structured_tensors():
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("semi-structured kernels need compute capability 8.0 or newer")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 64)).half().cuda().eval()
    layers = [("0", model[0]), ("2", model[2])]
    apply_masks(layers, {name: semi_structured_mask(m.weight) for name, m in layers})
    x = torch.randn(64, 256, dtype=torch.half, device="cuda")
    with torch.no_grad():
        dense = model(x)
        swapped = to_semi_structured(model, layers)
        sparse = model(x)
    assert swapped == ["0", "2"]
    assert type(model[0].weight.data).__name__.startswith("SparseSemiStructuredTensor")
    torch.testing.assert_close(sparse, dense, rtol=1e-2, atol=1e-2)
