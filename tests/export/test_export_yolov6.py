"""``up export`` of UP's YOLOv6 net writes the re-parameterised form: every RepVGG block one 3x3
convolution (no 1x1 or identity branch in the file), verified against the fused PyTorch model,
whose outputs equal the trained multi-branch one's (tests/tasks/det/test_yolov6.py)."""
import os

import pytest
import torch

from up_trainer.config import resolve_config
from up_trainer.tasks.det.yolov6 import RepVGGBlock
from up_trainer.tasks.net import build_model
from conftest import UP_FIXTURES  # noqa: E402

pytest.importorskip("onnxruntime")

V6N = os.path.join(UP_FIXTURES, "det", "yolov6", "yolox_v6n_ret_a2_comloc_400e_640x640.yaml")
NARROW = ["net.0.kwargs.width_multiple=0.125", "net.1.kwargs.width_multiple=0.125"]


@pytest.mark.slow  # 31 s at load 20 on 2 cores; the default suite checks the fused load (test_yolov6.py)
def test_onnx_export_holds_the_fused_blocks(tmp_path):
    import onnx

    from up_trainer.export import export_model

    cfg = resolve_config(V6N, NARROW)
    torch.manual_seed(0)
    model = build_model(cfg["net"])
    ckpt = str(tmp_path / "v6n.pth")
    torch.save(model.state_dict(), ckpt)
    blocks = sum(isinstance(m, RepVGGBlock) for m in model.modules())
    convs = sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())  # as trained: 2 convs a block
    out = str(tmp_path / "v6n.onnx")
    record = export_model(cfg, ckpt, "onnx", out, input_size="3,64,64")
    assert record["max_error"] <= 1e-4
    graph = onnx.load(out).graph
    names = [init.name for init in graph.initializer]
    assert not any("rbr_dense" in n or "rbr_1x1" in n or "rbr_identity" in n for n in names)
    assert sum(node.op_type == "Conv" for node in graph.node) == convs - blocks
