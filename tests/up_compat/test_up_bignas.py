"""UP's BigNAS files (tests/fixtures/up/nas/bignas/det): the three that name one subnet build it
as a static detector and dry-run on digit scenes with only data paths changed; a supernet
checkpoint slices into that subnet by UP's rule (each stage's first blocks, first channels)."""
import copy
import os

import pytest
import torch

from conftest import UP_FIXTURES, invoke
from test_up_configs import data_opts, up_data  # noqa: F401  (the module's tiny COCO digit scenes)
from up_trainer.config import resolve_loaded
from up_trainer.config.loader import load_file
from up_trainer.engine.builder import load_pretrained
from up_trainer.tasks.up_nets import build_up_net

DET = "nas/bignas/det"
SUBNET_FILES = [f"{DET}/bignas_retinanet_R18_{phase}.yaml" for phase in ("subnet", "finetune_subnet",
                                                                          "evaluate_subnet")]
FINETUNE = os.path.join(UP_FIXTURES, DET, "bignas_retinanet_R18_finetune_subnet.yaml")
# the supernet of the finetune file at its largest: net[0..2]'s space maxima
MAX_SETTINGS = {"backbone": {"depth": [1, 3, 4, 4, 6], "out_channel": [64, 80, 160, 320, 640]},
                "roi_head.cls_subnet": {"out_channel": [128]}, "roi_head.box_subnet": {"out_channel": [128]}}


def _raw(path=FINETUNE):
    return load_file(path)  # anchors-only top-level keys dropped, as a run reads the file


def _model(raw, tmp_path):
    cfg = resolve_loaded(copy.deepcopy(raw), source_path=str(tmp_path / "cfg.yaml"))
    return build_up_net(cfg["net"]), cfg


def _as_supernet_checkpoint(state, randomize=True):
    """A static state dict under the names UP's dynamic supernet stores (its stage-first blocks'
    shortcut conv and BN, the head's prediction convs inside a conv block); ``randomize``: every
    tensor drawn anew (positive, so running variances stay valid), so that slices are told apart."""
    out = {}
    for key, value in state.items():
        key = key.replace(".shortcut.conv.weight", ".shortcut.weight").replace(".shortcut.bn.", ".shortcutbn.")
        for side in ("cls", "box"):
            key = key.replace(f"roi_head.{side}_subnet_pred.", f"roi_head.{side}_subnet_pred.conv.")
        out[key] = torch.rand_like(value.float()).to(value.dtype) if value.dim() and randomize else value
    return out


@pytest.mark.parametrize("rel", SUBNET_FILES)
def test_subnet_file_dry_runs_with_data_opts(rel, up_data, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    res = invoke(["train", "--config", os.path.join(UP_FIXTURES, rel), "--work-dir", str(run_dir), "--dry-run",
                  "--device", "cpu", "--opts", *data_opts(rel, up_data)])
    assert res.exit_code == 0, res.stderr or res.exception
    log = (run_dir / "train.log").read_text()
    assert "dry run: train iteration 2/2" in log and "dry run: ok" in log


def test_subnet_settings_choose_the_static_parts(tmp_path):
    model, cfg = _model(_raw(), tmp_path)
    types = [e["type"] for e in cfg["net"]]
    assert types == ["bignas_resnet_basic", "bignas_fpn", "BignasRetinaHeadWithBN", "retina_post"]
    trunk = model.backbone
    assert [len(trunk.blocks)] == [1 + 2 + 2 + 4]  # depth [1, 1, 2, 2, 4] past the stem
    assert trunk.out_planes == [96, 192, 384]
    assert model.roi_head.cls_subnet.mlvl_heads[0][0][0].conv.out_channels == 64  # the subnet's, not feat_planes
    assert model.roi_head.num_anchors == 2  # anchor_ratios [1] x anchor_scales [6, 8]
    # convs shared by the levels, a norm per level
    heads = model.roi_head.cls_subnet.mlvl_heads
    assert heads[0][1][0] is heads[4][1][0] and heads[0][1][1] is not heads[4][1][1]


def test_supernet_checkpoint_slices_into_the_subnet(tmp_path):
    raw = _raw()
    big = copy.deepcopy(raw)
    big["bignas"]["subnet"]["subnet_settings"] = MAX_SETTINGS
    supernet, _ = _model(big, tmp_path)
    sup = _as_supernet_checkpoint(supernet.state_dict())
    path = tmp_path / "supernet.pth"
    torch.save({"model": sup}, path)
    subnet, _ = _model(raw, tmp_path)
    report = load_pretrained(subnet, str(path))
    assert not report["missing"] and not report["mismatched"], report
    own = subnet.state_dict()
    # supernet stages (blocks): 1: 0-2, 2: 3-6, 3: 7-10, 4: 11-16; the subnet's: 1: 0, 2: 1-2, 3: 3-4, 4: 5-8
    for mine, theirs in ((0, 0), (1, 3), (2, 4), (3, 7), (4, 8), (5, 11), (8, 14)):
        w = own[f"backbone.blocks.{mine}.normal_conv1.conv.weight"]
        o, i = w.shape[:2]
        assert torch.equal(w, sup[f"backbone.blocks.{theirs}.normal_conv1.conv.weight"][:o, :i])
    for mine, theirs in ((1, 3), (5, 11)):  # the stage-first blocks' shortcuts, renamed
        w = own[f"backbone.blocks.{mine}.shortcut.conv.weight"]
        assert torch.equal(w, sup[f"backbone.blocks.{theirs}.shortcut.weight"][:w.shape[0], :w.shape[1]])
        bn = own[f"backbone.blocks.{mine}.shortcut.bn.running_var"]
        assert torch.equal(bn, sup[f"backbone.blocks.{theirs}.shortcutbn.running_var"][:bn.numel()])
    tower = own["roi_head.cls_subnet.mlvl_heads.3.2.1.weight"]  # level 3's norm after the third conv
    assert torch.equal(tower, sup["roi_head.cls_subnet.mlvl_heads.3.2.1.weight"][:64])
    pred = own["roi_head.box_subnet_pred.weight"]
    assert torch.equal(pred, sup["roi_head.box_subnet_pred.conv.weight"][:, :64])
    assert not report["unexpected"]  # the supernet's deeper blocks are left out before loading


@pytest.mark.slow
def test_subnet_trains_from_a_supernet_checkpoint(up_data, tmp_path):  # noqa: F811
    raw = _raw()
    big = copy.deepcopy(raw)
    big["bignas"]["subnet"]["subnet_settings"] = MAX_SETTINGS
    supernet, _ = _model(big, tmp_path)
    ckpt = tmp_path / "supernet.pth"
    torch.save({"model": _as_supernet_checkpoint(supernet.state_dict(), randomize=False)}, ckpt)
    rel = f"{DET}/bignas_retinanet_R18_finetune_subnet.yaml"
    run_dir = tmp_path / "run"
    res = invoke(["train", "--config", FINETUNE, "--work-dir", str(run_dir), "--device", "cpu", "--opts",
                  *data_opts(rel, up_data), f"saver.pretrain_model={ckpt}", "trainer.max_epoch=1",
                  "trainer.test_freq=1", "trainer.lr_scheduler.warmup_epochs=0",
                  "dataset.dataloader.kwargs.num_workers=0"])
    assert res.exit_code == 0, res.stderr or res.exception
    log = (run_dir / "train.log").read_text()
    loaded = [line for line in log.splitlines() if "loaded" in line and "supernet.pth" in line]
    assert loaded and "shape-mismatched" not in log, log[-3000:]
    assert "bbox.AP" in log or "AP" in log
