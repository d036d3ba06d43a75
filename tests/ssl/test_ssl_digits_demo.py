"""The pretraining demo on scikit-learn's digits: SimCLR pretrains a small ResNet trunk without
labels (``up train``), then a linear probe written as UP's linear files are (a ``self`` entry
freezing ``backbone``, the pretraining checkpoint in ``saver.pretrain_model``) is trained and
evaluated; the same probe on the random backbone is the baseline. Fixed seeds, one thread.
Measured (4 pretraining epochs, 6 probe epochs): docs/ssl.rst."""
import json
import os

import pytest

from conftest import invoke, write_cfg

BACKBONE = {"type": "resnet18", "kwargs": {"input_channel": 1, "out_layers": [1], "out_strides": [4],
                                           "normalize": {"type": "solo_bn"}}}
VIEW = [{"type": "RandomResizedCrop", "kwargs": {"size": 16, "scale": [0.4, 1.0]}},
        {"type": "RandomAffine", "kwargs": {"degrees": 10}}]
PRETRAIN = {
    "runtime": {"seed": 0, "num_threads": 1},
    "dataset": {"batch_size": 128, "drop_last": True,
                "train": {"type": "digits", "kwargs": {"split": "train", "size": 16, "transforms": [
                    {"type": "two_views", "kwargs": {"transforms": VIEW}}]}}},
    "trainer": {"max_epoch": 4, "is_eval": False,
                "optimizer": {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}}},
    "net": {"type": "simclr", "kwargs": {"temperature": 0.2, "hidden_dim": 128, "backbone": BACKBONE}},
}
PROBE = {
    "runtime": {"seed": 0, "num_threads": 1},
    "dataset": {"batch_size": 128, "train": {"type": "digits", "kwargs": {"split": "train", "size": 16}},
                "test": {"type": "digits", "kwargs": {"split": "test", "size": 16}}},
    "trainer": {"max_epoch": 6, "test_freq": 6,
                "optimizer": {"type": "SGD", "kwargs": {"lr": 0.2, "momentum": 0.9, "weight_decay": 0.0}}},
    "net": [{"name": "fix_layers", "type": "self", "kwargs": {"freeze_patterns": ["backbone"]}},
            {"name": "backbone", **BACKBONE},
            {"name": "head", "type": "base_cls_head", "kwargs": {"num_classes": 10, "in_plane": 64}},
            {"name": "post_process", "type": "base_cls_postprocess", "kwargs": {"cls_loss": {"type": "ce"}}}],
}


def probe_top1(tmp_path, name, pretrained=None):
    cfg = write_cfg(tmp_path / f"{name}.yaml", PROBE)
    opts = ["--opts", f"saver.pretrain_model={pretrained}"] if pretrained else []
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / name, "--device", "cpu", *opts])
    assert res.exit_code == 0, res.stderr or res.exception
    with open(tmp_path / name / "metrics.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r["top1"] for r in rows if r.get("phase") == "eval"][-1]


@pytest.mark.slow
def test_linear_probe_after_pretraining_beats_the_random_backbone(tmp_path):
    res = invoke(["train", "--config", write_cfg(tmp_path / "pretrain.yaml", PRETRAIN), "--work-dir",
                  tmp_path / "pretrain", "--device", "cpu"])
    assert res.exit_code == 0, res.stderr or res.exception
    ckpt = tmp_path / "pretrain" / "checkpoints" / "ckpt_latest.pth"
    assert os.path.exists(ckpt)
    random_top1 = probe_top1(tmp_path, "probe_random")
    pretrained_top1 = probe_top1(tmp_path, "probe_pretrained", ckpt)
    print(f"linear probe top1: random backbone {random_top1:.1f}, after SimCLR {pretrained_top1:.1f}")
    assert pretrained_top1 > random_top1 + 15, (random_top1, pretrained_top1)
