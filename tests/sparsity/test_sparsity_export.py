"""A 2:4 sparse run exports as it trained: dense weights holding the zeros, in ONNX and in
TorchScript, verified against PyTorch by ``up export`` itself."""
import numpy as np
import onnx
import onnx.numpy_helper
import pytest
import torch

from conftest import invoke
from hostile_helpers import tiny_cfg, write_yaml
from up_trainer.sparsity.masks import is_semi_structured


@pytest.fixture(scope="module")
def sparse_ckpt(tmp_path_factory):
    work = tmp_path_factory.mktemp("sparse_export")
    cfg = write_yaml(work / "cfg.yaml", tiny_cfg(sparsity={"scheduler": "semi_structured"}))
    res = invoke(["train", "--config", cfg, "--work-dir", work])
    assert res.exit_code == 0, res.stderr
    return cfg, work / "checkpoints" / "ckpt_e1.pth"


def test_onnx_export_holds_the_2_4_zeros(sparse_ckpt, tmp_path):
    cfg, ckpt = sparse_ckpt
    out = tmp_path / "model.onnx"
    res = invoke(["export", "--config", cfg, "--checkpoint", ckpt, "--out", out])
    assert res.exit_code == 0, res.stderr
    saved = torch.load(ckpt, weights_only=True)
    masks = saved["hooks"]["sparsity"]["masks"]
    weights = [onnx.numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer]
    for name, mask in masks.items():  # each masked weight, found by its values (ONNX renames initializers)
        want = saved["model"][f"{name}.weight"].numpy()
        found = [w for w in weights if w.shape == want.shape and np.array_equal(w, want)]
        assert found, name
        assert is_semi_structured(torch.tensor(found[0] != 0), 4, 2)


def test_torchscript_export_holds_the_2_4_zeros(sparse_ckpt, tmp_path):
    cfg, ckpt = sparse_ckpt
    out = tmp_path / "model.pt"
    res = invoke(["export", "--config", cfg, "--checkpoint", ckpt, "--format", "torchscript", "--out", out])
    assert res.exit_code == 0, res.stderr
    scripted = torch.jit.load(str(out)).state_dict()
    masks = torch.load(ckpt, weights_only=True)["hooks"]["sparsity"]["masks"]
    for name, mask in masks.items():
        key = next(k for k in scripted if k.endswith(f"{name}.weight"))
        assert torch.equal(scripted[key] != 0, mask)
