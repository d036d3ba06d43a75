"""UP's own config files (tests/fixtures/up, copied unchanged from UP) run here.

- The families this project maps (cls: resnet, mobilenetv2, mobilenetv3, regnet, swin,
  vision_transformer; det: retinanet-r50_1x*, faster_rcnn_r50_fpn_1x, faster_rcnn_r50_C4_1x, rfcn,
  cascade-rcnn-R50-FPN-1x, yolox, fcos-R50-1x, retinanet-r18-improve, its cos_iou and ota variants,
  retinanet-r18_mosiac_cos_ema_iou, the yolox_*_ret_a*_comloc* files) pass ``up config`` unchanged, and ``up train --dry-run`` with
  only data paths, image size and batch size changed by ``--opts``, on tiny generated data: a UP
  ``cls`` meta file + digit images, and a small COCO set of digit scenes (the improve files' crop
  ``scale`` and ``fix_output_resize`` output [h, w] are image sizes too). The image size of a
  YOLOX pipeline is the mosaic's ``tar_size`` (and the perspective ``border``, minus half of it),
  the mixup ``input_size`` and the resizes' ``max_size`` / ``random_size``, wherever they are
  written (the yolox_noaug hook's pipeline too).
- Every other UP cls/det file passes ``up config`` or exits 2 with one line (``up config`` only:
  no training, so the sweep stays fast).

A file that fails only because a piece is still missing is marked xfail with the reason,
strict, so the mark has to go when the piece lands.
"""
import glob
import json
import os
import re

import numpy as np
import pytest
import yaml
from PIL import Image

from conftest import REPO, invoke, UP_FIXTURES
from up_trainer.tasks.up_nets.vit import VITS

UP_DIR = UP_FIXTURES
IMAGE_SIZE = 32  # crop / resize size for classification; detection resizes to DET_SCALE
DET_SCALE, DET_MAX = 64, 96
MOSAIC = 64  # a YOLOX mosaic's tar_size: a 128 x 128 canvas, cut back to 64 x 64 by the perspective border
RANDOM_SIZE = [2, 3]  # x scale_step 32: long sides of 64 or 96
BATCH = 2


def up_files(*patterns):
    return sorted(os.path.relpath(p, UP_DIR) for pat in patterns for p in glob.glob(os.path.join(UP_DIR, pat)))


FAMILIES = up_files("cls/resnet/*.yaml", "cls/mobilenetv2/*.yaml", "cls/regnet/*.yaml", "cls/swin/*.yaml",
                    "cls/vision_transformer/*.yaml", "cls/mobilenetv3/*.yaml", "cls/inference/*.yaml",
                    "cls/convnext/*.yaml", "cls/cswin/*.yaml", "cls/multicls/*.yaml", "cls/resnet/downstream/*.yaml",
                    "det/retinanet-r50_1x*.yaml", "det/faster_rcnn_r50_fpn_1x.yaml", "det/yolox/*.yaml",
                    "det/fcos/fcos-R50-1x.yaml", "det/retinanet/retinanet-r18-improve.yaml",
                    "det/retinanet/retinanet-r18-improve_cos_iou.yaml",
                    "det/retinanet/retinanet-r18-improve_ota.yaml",
                    "det/retinanet/retinanet-r18_mosiac_cos_ema_iou.yaml", "det/faster_rcnn/faster_rcnn_r50_C4_1x.yaml",
                    "det/rfcn/*.yaml", "det/cascade_rcnn/cascade-rcnn-R50-FPN-1x.yaml",
                    "det/retinanet/yolox_*_ret_a*_comloc*.yaml", "det/efl/efl_oids_*.yaml",
                    "det/efl/efl_improved_baseline_*.yaml", "det/efl/efl_yolox_*.yaml", "det/efl/eqfl_yolox_*.yaml",
                    "det/onenet/*.yaml",
                    "det/yolov6/*.yaml", "det/yolov5/*.yaml")
OTHERS = sorted(set(up_files("cls/**/*.yaml", "det/**/*.yaml")) - set(FAMILIES))

# Files of the mapped families that use a UP type or kwarg refused on purpose (docs/up/, Coming from
# UP): {file: the one-line error expected}.
REFUSED = {
    "det/rfcn/rfcn-R101-1x.yaml": "net[3].kwargs.cfg.roipooling.method: roialignpool is not mapped for R-FCN",
}
# A file that gives no data path at all: ``up config`` says so in one line.
NO_DATA = {"cls/swin/swin_transformer_base_384.yaml": "dataset.train.kwargs.meta_file: expected str, got NoneType"}

# With data given, a file UP itself cannot run: pconfig key 'linear' (UP: KeyError).
DRY_RUN_REFUSED = {"cls/swin/swin_transformer_base_384.yaml": "trainer.optimizer.pconfig.linear: unknown key"}

# Files of the mapped families that still fail because a piece is missing: {file: reason}.
# (Empty: every mapped file passes; a new gap goes here, marked xfail strict.)
CONFIG_GAPS = {}
DRY_RUN_GAPS = {}

# Swin base / large (88M-197M parameters) take 15-60 s each to build and step on a loaded 2-core
# machine; by default their dry run is left to UP_TRAINER_ALL_UP_DRY_RUNS=1 (they passed when the
# list was made). ``up config`` still builds and checks them (net on the meta device), and the
# dry runs of swin_tiny / swin_small run the same code.
BIG = {f"cls/swin/swin_transformer_{name}.yaml" for name in ("base_224", "large_224", "large_384")}
# The C4 Faster R-CNN runs ResNet-50's stage 5 on every sampled RoI (up to 2 x 512 of 7 x 7), the
# Cascade R-CNN three 12544 x 1024 FC stages and their RoIAlign backward on 2 x 512 RoIs: 10-50 s a
# step on 2 busy cores. tests/tasks/det/test_fcos_rcnn.py trains the same code at resnet18 size.
BIG |= {"det/faster_rcnn/faster_rcnn_r50_C4_1x.yaml", "det/cascade_rcnn/cascade-rcnn-R50-FPN-1x.yaml"}
# YOLOX-m/l/x under the RetinaNet post-process: 60-245 s a dry run at load 10 (they passed when
# added); the n/t/s files run the same code.
BIG |= {f"det/retinanet/yolox_{size}_ret_a{a}_comloc.yaml" for size in "mlx" for a in (1, 2)}
BIG |= {"det/efl/efl_oids_r101_2x_random.yaml",
        "det/efl/efl_improved_baseline_r101_2x_rfs.yaml"}  # ResNet-101 at 5 levels: ~150 s; the r50 files run the same code
BIG |= {"det/efl/efl_yolox_medium.yaml", "det/efl/eqfl_yolox_medium.yaml"}  # YOLOX-m; the small files run the same code
BIG |= {"det/onenet/onenet-r50_3x.yaml"}  # ResNet-50; onenet-r18 runs the same code
# YOLOv6-s/t (18.9M / 16.4M parameters): ~60 s a dry run at load 8; the n files run the same code.
BIG |= {f"det/yolov6/yolox_v6{size}_ret_a2_comloc_400e_640x640{aug}.yaml" for size in "st" for aug in ("", "_v6aug")}
BIG |= {"det/yolov5/yolov5_small_silu.yaml"}  # YOLOv5-s, 40-90 s at load 20; the relu file runs the same code
# CSWin-T/S/B and ConvNeXt-T/S: 50-180 s a dry run at load 6 (they passed when added);
# tests/up_compat/test_up_convnext_cswin.py trains a narrow ConvNeXt and runs a narrow CSWin.
BIG |= {"cls/cswin/cswin_tiny.yaml", "cls/cswin/cswin_small.yaml", "cls/cswin/cswin_base.yaml",
        "cls/convnext/convnext_t.yaml", "cls/convnext/convnext_s.yaml"}
# ResNet-50 downstream files: 10-30 s each at load 6; res50_car_strikes runs their code (and the
# torch_cutmix_mixup batch form), res50.yaml the rest.
BIG |= {f"cls/resnet/downstream/res50_{name}.yaml" for name in ("car", "flower", "pet", "flower_strikes")}
ALL_DRY_RUNS = os.environ.get("UP_TRAINER_ALL_UP_DRY_RUNS") == "1"


def cases(files, gaps):
    return [pytest.param(f, marks=pytest.mark.xfail(reason=gaps[f], strict=True)) if f in gaps else f
            for f in files]


# -- tiny data --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def up_data(tmp_path_factory):
    """A UP cls set (meta files + RGB digit PNGs) and a COCO set of digit scenes."""
    from up_trainer.tasks.cls.datasets import _load_digits
    from up_trainer.tasks.det.export import export_digits_coco

    root = tmp_path_factory.mktemp("up_data")
    images, labels = _load_digits()
    for split, rows in (("train", range(0, 12)), ("val", range(100, 106))):
        os.makedirs(root / "images" / split)
        lines = []
        for i in rows:
            gray = (images[i] / 16.0 * 255).astype(np.uint8)
            Image.fromarray(gray).resize((40, 40)).convert("RGB").save(root / "images" / split / f"{i}.png")
            lines.append(f"{i}.png {labels[i]}")
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n")
        for name, label in (("custom", lambda y: y), ("two_heads", lambda y: [y, y % 2])):  # custom_cls JSON lines
            records = [json.dumps({"filename": f"{i}.png", "label": label(int(labels[i]))}) for i in rows]
            (root / f"{split}_{name}.txt").write_text("\n".join(records) + "\n")  # two_heads: list labels
    (root / "cls_freq.json").write_text(json.dumps([150] * 3 + [50] * 3 + [5] * 994))  # images per class
    coco = export_digits_coco(str(root / "coco"), num_images=6, num_val_images=4, seed=0)
    from lvis_fixtures import digits_lvis  # UP's lvisv1 files: the same kind of scenes as LVIS v1 files

    return {"root": str(root), "coco": coco, "lvis": digits_lvis(str(root / "lvis"), num_images=6, num_val_images=4)}


def data_opts(rel, data):
    """--opts for one UP file: data paths, image size and batch size, nothing else."""
    with open(os.path.join(UP_DIR, rel), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    ds, opts = cfg["dataset"], []
    two_heads = any(isinstance((e.get("kwargs") or {}).get("num_classes"), list) for e in cfg.get("net") or []
                    if isinstance(e, dict))  # UP's multi-head classification: a list label per image
    for split in ("train", "test"):
        entry = ds.get(split)
        if not isinstance(entry, dict) or "dataset" not in entry:
            continue
        pre = f"dataset.{split}.dataset.kwargs"
        kwargs = entry["dataset"]["kwargs"]
        if entry["dataset"]["type"] == "cls":
            sub = "train" if split == "train" else "val"
            meta = sub if kwargs.get("meta_type") != "custom_cls" else f"{sub}_{'two_heads' if two_heads else 'custom'}"
            opts += [f"{pre}.meta_file={data['root']}/{meta}.txt",
                     f"{pre}.image_reader.kwargs.image_dir={data['root']}/images/{sub}"]
            if "inference_from" in (kwargs.get("inference_cfg") or {}):  # an image folder, searched
                opts.append(f"{pre}.inference_cfg.inference_from={data['root']}/images/{sub}")
            if "cls_freq" in (kwargs.get("evaluator") or {}).get("kwargs", {}):  # imagenet_lt's class counts
                opts.append(f"{pre}.evaluator.kwargs.cls_freq={data['root']}/cls_freq.json")
        else:
            form = "lvis" if entry["dataset"]["type"] == "lvisv1" else "coco"
            ann, img_dir = data[form]["train" if split == "train" else "val"]
            opts += [f"{pre}.meta_file={ann}", f"{pre}.image_reader.kwargs.image_dir={img_dir}"]
            if "gt_file" in (kwargs.get("evaluator") or {}).get("kwargs", {}):
                opts.append(f"{pre}.evaluator.kwargs.gt_file={ann}")
        opts += size_opts(f"{pre}.transformer", kwargs.get("transformer"))
        if "batch_sampler" in entry:
            opts.append(f"dataset.{split}.batch_sampler.kwargs.batch_size={BATCH}")
    if "batch_sampler" in ds:
        opts.append(f"dataset.batch_sampler.kwargs.batch_size={BATCH}")
    for i, entry in enumerate(cfg.get("net") or []):  # a ViT's position embedding fixes its input size
        if isinstance(entry, dict) and entry.get("type") in VITS:
            opts.append(f"net.{i}.kwargs.image_size={IMAGE_SIZE}")
        if isinstance(entry, dict) and entry.get("type") == "yolov5_post":  # the cluster anchors: a data file
            opts.append(f"net.{i}.kwargs.cfg.anchor_generator.kwargs.base_anchors_file="
                        f"{os.path.join(UP_DIR, os.path.dirname(rel), 'anchors.json')}")
    for i, hook in enumerate(cfg.get("hooks") or []):
        if isinstance(hook, dict) and hook.get("type") == "yolox_noaug":
            opts += size_opts(f"hooks.{i}.kwargs.transformer", hook["kwargs"].get("transformer"))
    return opts


def size_opts(pre, transforms):
    """--opts setting the image size in every transform of one pipeline that sets one."""
    opts = []
    for i, t in enumerate(transforms or []):
        tk = t.get("kwargs") or {}
        if "size" in tk:
            size = IMAGE_SIZE + 4 if t["type"] == "torch_resize" else IMAGE_SIZE
            opts.append(f"{pre}.{i}.kwargs.size={size}")
        if "scales" in tk:  # fix_output_resize: the output [h, w]
            scales = [DET_SCALE, DET_SCALE] if t["type"] == "fix_output_resize" else [DET_SCALE]
            opts.append(f"{pre}.{i}.kwargs.scales={scales}")
        if t["type"] == "crop" and "scale" in tk:  # UP's improve crop: the window's side
            opts.append(f"{pre}.{i}.kwargs.scale={DET_SCALE}")
        if "max_size" in tk:
            opts.append(f"{pre}.{i}.kwargs.max_size={DET_MAX}")
        if "random_size" in tk:
            opts.append(f"{pre}.{i}.kwargs.random_size={RANDOM_SIZE}")
        if "tar_size" in tk:
            opts.append(f"{pre}.{i}.kwargs.tar_size={MOSAIC}")
        if "border" in tk:
            opts.append(f"{pre}.{i}.kwargs.border=[{-MOSAIC // 2}, {-MOSAIC // 2}]")
        if "input_size" in tk:
            opts.append(f"{pre}.{i}.kwargs.input_size=[{MOSAIC}, {MOSAIC}]")
    return opts


REPEATED_KEY = re.compile(r"^\S+:\d+: key .* given twice with different values")  # the loader's warning


def one_error_line(res):
    lines = [line for line in res.stderr.strip().splitlines() if not REPEATED_KEY.match(line)]
    return len(lines) == 1 and lines[0].startswith("up: error: ") and "Traceback" not in res.stderr


# -- the mapped families -------------------------------------------------------------------------
MAPPED = [f for f in FAMILIES if f not in REFUSED]


@pytest.mark.parametrize("rel", cases([f for f in MAPPED if f not in NO_DATA], CONFIG_GAPS))
def test_family_file_passes_up_config_unchanged(rel):
    res = invoke(["config", "--config", os.path.join(UP_DIR, rel)])
    assert res.exit_code == 0, res.stderr or res.exception
    assert res.stdout.startswith("# UP form: ")


@pytest.mark.parametrize("rel", sorted({**REFUSED, **NO_DATA}))
def test_family_file_refused_in_one_line(rel):
    res = invoke(["config", "--config", os.path.join(UP_DIR, rel)])
    assert res.exit_code == 2 and one_error_line(res), res.stderr or res.exception
    assert {**REFUSED, **NO_DATA}[rel] in res.stderr


def dry_run(rel, data, run_dir):
    return invoke(["train", "--config", os.path.join(UP_DIR, rel), "--work-dir", run_dir, "--dry-run",
                   "--device", "cpu", "--opts", *data_opts(rel, data)])


@pytest.mark.parametrize("rel", cases([f for f in MAPPED if f not in DRY_RUN_REFUSED and (ALL_DRY_RUNS or f not in BIG)],
                                      DRY_RUN_GAPS))
def test_family_file_dry_runs_with_data_opts(rel, up_data, tmp_path):
    run_dir = tmp_path / "run"
    res = dry_run(rel, up_data, run_dir)
    assert res.exit_code == 0, res.stderr or res.exception
    assert os.listdir(run_dir) == ["train.log"]
    log = (run_dir / "train.log").read_text()
    assert "dry run: train iteration 2/2" in log and "dry run: ok" in log


@pytest.mark.parametrize("rel", sorted(DRY_RUN_REFUSED))
def test_family_file_dry_run_refused_in_one_line(rel, up_data, tmp_path):
    res = dry_run(rel, up_data, tmp_path / "run")
    assert res.exit_code == 2 and one_error_line(res), res.stderr or res.exception
    assert DRY_RUN_REFUSED[rel] in res.stderr


# -- every other UP file: runs, or one line and exit 2 ----------------------------------------------
@pytest.mark.parametrize("rel", OTHERS)
def test_other_file_passes_or_fails_in_one_line(rel):
    res = invoke(["config", "--config", os.path.join(UP_DIR, rel)])
    assert res.exit_code in (0, 2), res.exception
    assert res.exit_code == 0 or one_error_line(res), res.stderr


def test_yolox_file_trains_through_its_noaug_switch(up_data, tmp_path):
    """yolox_nano.yaml shortened to two epochs (the hook's and the schedule's lengths with it):
    epoch 1 on mosaic + perspective, epoch 2 rebuilt from UP's dataset entry with the hook's
    pipeline and the L1 loss, then evaluated (the hook's test_freq 1)."""
    rel = "det/yolox/yolox_nano.yaml"
    run_dir = tmp_path / "run"
    shorter = ["trainer.max_epoch=2", "hooks.0.kwargs.max_epoch=2", "hooks.0.kwargs.no_aug_epoch=1",
               "trainer.lr_scheduler.kwargs.T_max=2", "trainer.lr_scheduler.kwargs.no_aug_epoch=1",
               "trainer.lr_scheduler.warmup_epochs=0", f"saver.save_dir={tmp_path / 'ckpt'}",
               "dataset.dataloader.kwargs.num_workers=0"]
    res = invoke(["train", "--config", os.path.join(UP_DIR, rel), "--work-dir", run_dir, "--device", "cpu",
                  "--opts", *data_opts(rel, up_data), *shorter])
    assert res.exit_code == 0, (res.stderr or res.exception, res.stdout[-2000:])
    log = (run_dir / "train.log").read_text()
    assert ("yolox_noaug: epoch 2 on trains without the mixing augmentation (pipeline: augment_hsv, flip, "
            "keep_ar_resize_max, custom_to_tensor), L1 loss on") in log
    assert "eval epoch 2 (iter 6): bbox.AP=" in log and "eval epoch 1" not in log
