"""UP's self-supervised files (tests/fixtures/up/ssl, unchanged) run ``up train --dry-run`` with
only data paths, image size and batch size changed by ``--opts``, on the tiny UP cls set of
tests/up_compat/test_up_configs.py: one pretraining file per method family (MoCo v1, v2, v3,
SimCLR, SimSiam, MAE) and the linear-probe files, whose ``pretrain_model`` is a checkpoint of
the matching pretraining net."""
import os

import pytest
import torch

from conftest import UP_FIXTURES, invoke
from test_up_configs import IMAGE_SIZE, data_opts, up_data  # noqa: F401  (up_data: a fixture)

# simclr_v2 differs from simclr_v1 by one projector layer (the same code)
PRETRAINING = ["ssl/mocov1/moco_v1.yaml", "ssl/mocov2/moco_v2.yaml", "ssl/mocov3/moco_v3.yaml",
               "ssl/simclrv1/simclr_v1.yaml", "ssl/simsiam/simsiam_100e.yaml",
               "ssl/mae/mae_vit_base_patch16_dec512d8b.yaml"]
LINEAR = ["ssl/mocov1/moco_v1_imagenet_linear.yaml", "ssl/simsiam/simsiam_linear.yaml",
          "ssl/mae/mae_vit_base_patch16_dec512d8b_linear.yaml"]


def ssl_opts(rel):
    """What data_opts cannot know: the view recipes' crop size and the pretraining ViTs' input size."""
    opts = [f"dataset.train.dataset.kwargs.transformer.0.kwargs.size={IMAGE_SIZE}"] if "mae" not in rel else []
    if "mocov3" in rel:
        opts += [f"net.0.multi_model.{i}.kwargs.img_size={IMAGE_SIZE}" for i in (0, 1)]
    if rel.endswith("dec512d8b.yaml"):
        opts.append(f"net.0.multi_model.0.kwargs.img_size={IMAGE_SIZE}")
    return opts


def dry_run(rel, data, run_dir, extra=()):
    return invoke(["train", "--config", os.path.join(UP_FIXTURES, rel), "--work-dir", run_dir, "--dry-run",
                   "--device", "cpu", "--opts", *data_opts(rel, data), *extra])


def assert_dry_run_ok(res, run_dir):
    assert res.exit_code == 0, res.stderr or res.exception
    log = (run_dir / "train.log").read_text()
    assert "dry run: train iteration 2/2" in log and "dry run: ok" in log


@pytest.mark.parametrize("rel", PRETRAINING)
def test_pretraining_file_dry_runs(rel, up_data, tmp_path):  # noqa: F811
    res = dry_run(rel, up_data, tmp_path / "run", ssl_opts(rel))
    assert_dry_run_ok(res, tmp_path / "run")


def _pretrained_backbone(rel, data, tmp_path):
    """A weights file of the pretraining net that goes with a linear file (built, not trained)."""
    from up_trainer.config import resolve_config
    from up_trainer.tasks.net import build_model

    source = {"moco": "ssl/mocov1/moco_v1.yaml", "simsiam": "ssl/simsiam/simsiam_100e.yaml",
              "mae": "ssl/mae/mae_vit_base_patch16_dec512d8b.yaml"}[rel.split("/")[1].rstrip("v1")]
    opts = data_opts(source, data) + ssl_opts(source)
    model = build_model(resolve_config(os.path.join(UP_FIXTURES, source), opts)["net"])
    path = tmp_path / "pretrained.pth"
    torch.save({"model": model.state_dict()}, path)
    return path


def _linear_opts(rel):
    return [f"net.1.kwargs.image_size={IMAGE_SIZE}"] if "mae" in rel else []


@pytest.mark.parametrize("rel", LINEAR)
def test_linear_file_dry_runs_on_a_pretraining_checkpoint(rel, up_data, tmp_path):  # noqa: F811
    weights = _pretrained_backbone(rel, up_data, tmp_path)
    res = dry_run(rel, up_data, tmp_path / "run", [f"saver.pretrain_model={weights}", *_linear_opts(rel)])
    assert_dry_run_ok(res, tmp_path / "run")


@pytest.mark.parametrize("rel", LINEAR)
def test_linear_file_loads_every_backbone_tensor_and_trains_only_its_head(rel, up_data, tmp_path):  # noqa: F811
    """What the dry run leaves out: the pretraining net's backbone.* fills the probe's backbone."""
    from up_trainer.config import resolve_config
    from up_trainer.engine.builder import load_pretrained
    from up_trainer.tasks.net import build_model

    weights = _pretrained_backbone(rel, up_data, tmp_path)
    cfg = resolve_config(os.path.join(UP_FIXTURES, rel), data_opts(rel, up_data) + _linear_opts(rel))
    model = build_model(cfg["net"])
    report = load_pretrained(model, str(weights))
    backbone = [k for k in model.state_dict() if k.startswith("backbone.")]
    if "mae" in rel:  # the linear file's ViT has no last norm (last_norm: false); MAE's encoder has one
        assert not [k for k in backbone if k not in report["loaded"]]
    else:
        assert set(backbone) <= set(report["loaded"])
    assert report["missing"] and all(k.startswith("head.") for k in report["missing"])
    trainable = {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"head"}
    model.train()
    assert not any(m.training for m in model.backbone.modules())  # frozen BatchNorm keeps its statistics


FINETUNE = "ssl/mae/mae_vit_base_patch16_dec512d8b_finetune.yaml"


def test_mae_finetune_file_dry_runs_with_layer_decay(up_data, tmp_path):  # noqa: F811
    """MAE's fine-tune file: the pretraining checkpoint fills its ViT, and UP's layer_decay
    (0.65 over 12 blocks, base_lr 0.002) gives the patch embedding 0.002 * 0.65 ** 12 and the
    head 0.002, as the logged param groups show."""
    weights = _pretrained_backbone(FINETUNE, up_data, tmp_path)
    res = dry_run(FINETUNE, up_data, tmp_path / "run", [f"saver.pretrain_model={weights}",
                                                       f"net.0.kwargs.image_size={IMAGE_SIZE}"])
    assert_dry_run_ok(res, tmp_path / "run")
    log = (tmp_path / "run" / "train.log").read_text()
    assert f"lr={0.002 * 0.65 ** 12:.6g}" in log and "e.g. backbone.class_token" in log
    assert "layer12" in log and "lr=0.002 " in log
