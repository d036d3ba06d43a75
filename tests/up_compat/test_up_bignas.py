"""UP's BigNAS files (tests/fixtures/up/nas/bignas/det): the three that name one subnet build it
as a static detector, the supernet file trains the elastic net by the sandwich rule; each
dry-runs on digit scenes with only data paths changed. A supernet checkpoint slices into a
subnet by UP's rule (each stage's first blocks, first channels, centre of the kernels), and the
sliced subnet computes what the supernet computes with that subnet active."""
import copy
import os
import random

import pytest
import torch

from conftest import UP_FIXTURES, invoke
from test_up_configs import data_opts, up_data  # noqa: F401  (the module's tiny COCO digit scenes)
from up_trainer.config import resolve_loaded
from up_trainer.config.loader import load_file
from up_trainer.engine.builder import load_pretrained
from up_trainer.tasks.up_nets import build_up_net

DET = "nas/bignas/det"
RUNNING = [f"{DET}/bignas_retinanet_R18_{phase}.yaml" for phase in ("subnet", "finetune_subnet", "train_supnet")]
RUNNING.append(pytest.param(f"{DET}/bignas_retinanet_R18_evaluate_subnet.yaml", marks=pytest.mark.slow))  # the
# finetune file's net and data: its dry run adds the calibration split's keys only
FINETUNE = os.path.join(UP_FIXTURES, DET, "bignas_retinanet_R18_finetune_subnet.yaml")
SUPNET = os.path.join(UP_FIXTURES, DET, "bignas_retinanet_R18_train_supnet.yaml")
# the supernet of the finetune file at its largest: net[0..2]'s space maxima
MAX_SETTINGS = {"backbone": {"depth": [1, 3, 4, 4, 6], "out_channel": [64, 80, 160, 320, 640]},
                "roi_head.cls_subnet": {"out_channel": [128]}, "roi_head.box_subnet": {"out_channel": [128]}}


def _raw(path=FINETUNE):
    return load_file(path)  # anchors-only top-level keys dropped, as a run reads the file


def _model(raw, tmp_path):
    cfg = resolve_loaded(copy.deepcopy(raw), source_path=str(tmp_path / "cfg.yaml"))
    return build_up_net(cfg["net"]), cfg


def _as_supernet_checkpoint(state, randomize=True, rename=True):
    """A static state dict under the names UP's dynamic supernet stores (its stage-first blocks'
    shortcut conv and BN, the head's prediction convs inside a conv block); ``randomize``: every
    tensor drawn anew (positive, so running variances stay valid), so that slices are told apart."""
    out = {}
    for key, value in state.items():
        if not rename:
            out[key] = torch.rand_like(value.float()).to(value.dtype) if value.dim() else value
            continue
        key = key.replace(".shortcut.conv.weight", ".shortcut.weight").replace(".shortcut.bn.", ".shortcutbn.")
        for side in ("cls", "box"):
            key = key.replace(f"roi_head.{side}_subnet_pred.", f"roi_head.{side}_subnet_pred.conv.")
        out[key] = torch.rand_like(value.float()).to(value.dtype) if value.dim() and randomize else value
    return out


@pytest.mark.parametrize("rel", RUNNING)
def test_file_dry_runs_with_data_opts(rel, up_data, tmp_path):  # noqa: F811
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


def test_supernet_runs_the_sandwich_and_its_slice_computes_the_same(tmp_path):
    supernet, _ = _model(load_file(SUPNET), tmp_path)
    assert type(supernet).__name__ == "BigNASSupernet"
    supernet.load_state_dict(_as_supernet_checkpoint(supernet.state_dict(), rename=False))  # random, positive
    images = {"image": [torch.rand(3, 64, 64), torch.rand(3, 64, 64)],
              "target": [{"boxes": torch.tensor([[4.0, 6.0, 40.0, 50.0]]), "labels": torch.tensor([3])}] * 2}
    supernet.train()
    modes, settings = [], []
    for _ in range(2):
        supernet(images)
        modes.append(supernet.subnet[0])
        settings.append(supernet.subnet[1])
    assert modes == ["max", "random"] and int(supernet.bignas_step) == 2
    supernet.bignas_step.fill_(3)
    supernet(images)
    assert supernet.subnet[0] == "min"  # the sandwich's place follows the saved step
    setting = supernet.set_subnet("random", random.Random(1000))  # step 1's subnet, drawn again from its seed
    assert setting == settings[1] != settings[0]
    path = tmp_path / "supernet.pth"
    torch.save({"model": supernet.state_dict()}, path)

    raw = _raw()
    raw["bignas"]["subnet"]["subnet_settings"] = {
        "backbone": {k: setting["backbone"][k] for k in ("depth", "out_channel", "kernel_size")},
        "neck": setting["neck"], "roi_head.cls_subnet": setting["roi_head.cls_subnet"],
        "roi_head.box_subnet": setting["roi_head.box_subnet"]}
    subnet, _ = _model(raw, tmp_path)
    report = load_pretrained(subnet, str(path))
    assert not report["missing"] and not report["mismatched"] and not report["unexpected"], report
    supernet.eval(), subnet.eval()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        supernet.set_subnet("random", random.Random(1000))
        theirs = supernet.roi_head(supernet.features(x))
        mine = subnet.roi_head(subnet.features(x))
    for (c1, b1), (c2, b2) in zip(theirs, mine):
        assert torch.allclose(c1, c2, atol=1e-4) and torch.allclose(b1, b2, atol=1e-4)


def test_up_flops_lists_sampled_subnets_within_the_range(tmp_path):
    rel = os.path.join(UP_FIXTURES, DET, "bignas_retinanet_R18_sample_flops.yaml")
    res = invoke(["flops", "--config", rel, "--input-size", "3,64,64", "--opts", "bignas.subnet.subnet_count=3",
                  "bignas.subnet.flops_range=['0.2G','0.6G']"])
    assert res.exit_code == 0, res.stderr or res.exception
    lines = res.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("sampled subnets"))
    assert "within 200.00M..600.00M" in lines[head]
    rows = lines[head + 1:]
    assert 1 <= len(rows) <= 3
    values = [float(r.split()[0][:-1]) for r in rows]  # in M, sorted
    assert values == sorted(values) and all(200 <= v <= 600 for v in values), rows
    assert all('"backbone": {"depth": [1' in r for r in rows)


@pytest.mark.slow
def test_supernet_trains_then_its_subnet_fine_tunes_from_it(up_data, tmp_path):  # noqa: F811
    common = ["--device", "cpu", "trainer.max_epoch=1", "trainer.lr_scheduler.warmup_epochs=0",
              "dataset.dataloader.kwargs.num_workers=0"]
    sup_dir, sub_dir = tmp_path / "supernet", tmp_path / "subnet"
    res = invoke(["train", "--config", SUPNET, "--work-dir", str(sup_dir), "--device", "cpu", "--opts",
                  *data_opts(f"{DET}/bignas_retinanet_R18_train_supnet.yaml", up_data), *common[2:]])
    assert res.exit_code == 0, res.stderr or res.exception
    ckpt = sorted(sup_dir.rglob("ckpt_e*.pth"))[-1]
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["model"]
    assert int(state["bignas_step"]) == 3  # 6 scenes, batch 2: max, random, random
    res = invoke(["train", "--config", FINETUNE, "--work-dir", str(sub_dir), "--device", "cpu", "--opts",
                  *data_opts(f"{DET}/bignas_retinanet_R18_finetune_subnet.yaml", up_data),
                  f"saver.pretrain_model={ckpt}", *common[2:]])
    assert res.exit_code == 0, res.stderr or res.exception
    log = (sub_dir / "train.log").read_text()
    assert "shape-mismatched" not in log and "missing" not in log, log[-3000:]
    evaluate = os.path.join(UP_FIXTURES, DET, "bignas_retinanet_R18_evaluate_subnet.yaml")  # UP's -e phase
    res = invoke(["train", "-e", "--config", evaluate, "--work-dir", str(tmp_path / "eval"), "--device", "cpu",
                  "--opts", *data_opts(f"{DET}/bignas_retinanet_R18_evaluate_subnet.yaml", up_data),
                  f"saver.pretrain_model={ckpt}", "saver.auto_resume=false", *common[2:]])
    assert res.exit_code == 0, res.stderr or res.exception
    log = (tmp_path / "eval" / "train.log").read_text()
    assert any(str(ckpt) in line and "loaded" in line for line in log.splitlines()), log[-3000:]
    assert "shape-mismatched" not in log and "missing" not in log
    assert "calib_bn: BatchNorm statistics re-estimated on 6 train images" in log  # UP's evaluate_subnet
