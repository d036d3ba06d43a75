"""1-epoch train + eval of every detector type at a tiny size, through the real CLI."""
import json
import os

import pytest
import torch
import yaml
from click.testing import CliRunner

from up_trainer.cli import main
from up_trainer.registry import MODELS

SCENES = {"canvas_size": 48, "digits_per_image": [1, 2], "scale_range": [10, 16], "seed": 0}
TINY = {"fcos": {"backbone": "resnet18", "returned_layers": [2, 3], "fpn_extra": "none", "head_convs": 1},
        "retinanet": {"backbone": "resnet18", "returned_layers": [2, 3], "fpn_extra": "none"},
        "faster_rcnn": {"backbone": "mobilenet_v3_large", "returned_layers": [2, 3],
                        "det_kwargs": {"rpn_batch_size_per_image": 32, "box_batch_size_per_image": 32}},
        "ssdlite": {"trainable_layers": 6}}


def _config(tmp_path, kind, hooks=(), **runtime):
    net = {"num_classes": 10, "min_size": 48, "max_size": 48, "fpn_channels": 32, **TINY[kind]}
    if kind == "ssdlite":
        net.pop("fpn_channels")
    cfg = {"runtime": {"seed": 0, "num_threads": 1, **runtime},
           "dataset": {"train": {"type": "digits_det", "kwargs": {"split": "train", "num_images": 2, **SCENES}},
                       "test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 2, **SCENES}},
                       "batch_size": 2},
           "trainer": {"max_epoch": 1, "optimizer": {"type": "AdamW", "kwargs": {"lr": 0.001}}},
           "hooks": list(hooks),
           "net": {"type": kind, "kwargs": net}}
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _train(cfg, work_dir, *extra):
    res = CliRunner().invoke(main, ["train", "--config", cfg, "--work-dir", str(work_dir), *extra])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res


@pytest.mark.parametrize("kind", ["fcos", "retinanet", "faster_rcnn", "ssdlite"])
def test_one_epoch_train_and_eval(tmp_path, kind):
    cfg = _config(tmp_path, kind)
    _train(cfg, tmp_path / "run")
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "ckpt_e1.pth", weights_only=True)
    assert ckpt["epoch"] == 1 and isinstance(ckpt["metric_val"], float)  # auto_save_best watched bbox.AP
    assert os.path.exists(tmp_path / "run" / "checkpoints" / "ckpt_best.pth")
    top = {k.split(".")[0] for k in ckpt["model"]}
    assert {"backbone", "head"} <= top and (kind == "ssdlite" or "neck" in top)


def test_eval_command_writes_metrics_and_coco_results(tmp_path):
    cfg = _config(tmp_path, "retinanet")
    _train(cfg, tmp_path / "run")
    res = CliRunner().invoke(main, ["eval", "--config", cfg, "--work-dir", str(tmp_path / "run"),
                                    "--checkpoint", str(tmp_path / "run" / "checkpoints" / "ckpt_e1.pth")])
    assert res.exit_code == 0, res.output
    metrics = json.loads((tmp_path / "run" / "results_dir" / "metrics.json").read_text())
    assert {"bbox.AP", "bbox.AP50", "bbox.AP75", "bbox.APs", "bbox.APm", "bbox.APl"} <= set(metrics)
    assert isinstance(json.loads((tmp_path / "run" / "results_dir" / "results.bbox.json").read_text()), list)


def test_detection_with_ema_clipping_amp_and_visualize(tmp_path):
    hooks = [{"type": "ema", "kwargs": {"decay": 0.9}},
             {"type": "grad_clipper", "kwargs": {"max_norm": 5.0}},
             {"type": "visualize", "kwargs": {"num_images": 2}}]
    cfg = _config(tmp_path, "fcos", hooks, amp={"enable": True, "dtype": "bfloat16", "force": True})
    _train(cfg, tmp_path / "run")
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "ckpt_e1.pth", weights_only=True)
    assert isinstance(ckpt["ema"]["model"], dict) and "head.classification_head.cls_logits.bias" in ckpt["ema"]["model"]
    png = tmp_path / "run" / "vis" / "epoch_001.png"
    assert png.exists()
    assert any(f.startswith("events") for f in os.listdir(tmp_path / "run" / "log"))


def test_proxies_follow_a_replaced_child_and_pretrained_is_local():
    m = MODELS.build({"type": "fcos", "kwargs": {"num_classes": 3, "backbone": "resnet18", "min_size": 32,
                                                   "max_size": 32, "fpn_channels": 32, "returned_layers": [3],
                                                   "fpn_extra": "none"}})
    calls = []
    inner = m.neck

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            calls.append(1)
            return self.inner(x)

    m.neck = Spy()  # what a memory-checkpoint hook does to a top-level child
    m.eval()
    with torch.no_grad():
        out = m({"image": [torch.rand(3, 32, 32)]})
    assert calls and "boxes" in out["detections"][0]
    assert all(p.requires_grad for p in m.parameters())  # from scratch: nothing frozen
