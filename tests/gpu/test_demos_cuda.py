"""The two README demos, unchanged, on CUDA (about 2.5 minutes on an H100).

Thresholds sit below the CPU figures (README: 98.61 % top-1; FCOS bbox.AP 0.602, above 0.50
from epoch 4) by the margin seeds and GPU kernels move them.
"""
import pytest

from conftest import REPO
from gpu_helpers import last_metric, up_subprocess

pytestmark = pytest.mark.cuda


def test_digits_classification_demo(tmp_path):
    res = up_subprocess("--config", f"{REPO}/configs/cls/digits_resnet18.yaml", "--work-dir", tmp_path / "cls",
                        "--device", "cuda", timeout=600)
    assert last_metric(res.stdout, "top1") >= 97.0
    assert " mem " in res.stdout  # the logger reports torch.cuda.max_memory_allocated


def test_digits_fcos_detection_demo(tmp_path):
    res = up_subprocess("--config", f"{REPO}/configs/det/digits_fcos.yaml", "--work-dir", tmp_path / "det",
                        "--device", "cuda", "--opts", "runtime.num_threads=null", timeout=600)
    assert last_metric(res.stdout, "bbox.AP") >= 0.50
