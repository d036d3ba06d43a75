"""Input pipelines on the CPU: images/s of up's classification and detection loaders (decode +
transforms + collate) per DataLoader worker count, against a bare torchvision pipeline.

    python benchmarks/dataloader.py [--workers 0 1 2] [--rounds 3] [--cls-images 256] [--det-images 64]
                                    [--pipelines cls det yolox]

The data are JPEG files written to a temporary directory first: ``cls`` 10 class folders of
320x256 images, ``det`` a COCO instances file with 640x480 images and 3-8 boxes each.

- ``cls`` up: ``image_folder`` dataset, transforms RandomResizedCrop(224) + RandomHorizontalFlip
  + Normalize, up's LoaderFactory (per-batch seeding, resumable sampler, collate), batch 32.
  Bare: ``torchvision.datasets.ImageFolder`` (PIL) with the same v2 transforms after
  ToImage + ToDtype(float32, scale), ``DataLoader(shuffle=True)``, batch 32.
- ``det`` up: ``coco`` dataset, transforms keep_ar_resize_max(scales [640], max_size 1066) +
  flip, LoaderFactory, batch 8. Bare: ``torchvision.datasets.CocoDetection`` wrapped for
  transforms v2 with Resize(640, max_size=1066) + RandomHorizontalFlip + ToDtype, a list collate.
- ``yolox`` up only (torchvision has no equivalent): the same COCO data through UP's YOLOX
  training pipeline as UP's yolox_small.yaml writes it (mosaic tar_size 640, random_perspective_yolox
  border -320, yolox_mixup_cv2 640, augment_hsv, flip, keep_ar_resize_max random_size [15, 25]
  x 32 with left_top padding, custom_to_tensor), batch 8. Each image decodes 5 (4 mosaic + 1 mixup).

Each (pipeline, loop, worker count) is one full pass over the data with a fresh DataLoader (its
worker start-up included, as an epoch without persistent workers has it). The order of the
loops alternates each round; medians over ``--rounds`` rounds. One intra-op thread in the main
process and in every worker (as torch sets in workers), so worker counts compare processes.
"""
import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from up_trainer.data.loader import LoaderFactory  # noqa: E402
from up_trainer.engine.builder import build_dataset  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def smooth_image(rng, width, height):
    """A JPEG-friendly picture: a colour gradient with a little noise (compresses like a photo)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([x / width, y / height, (x + y) / (width + height)], axis=2) * rng.uniform(80, 200, 3)
    noise = rng.normal(0, 12, (height, width, 3))
    return Image.fromarray(np.clip(base + noise + 30, 0, 255).astype(np.uint8))


def write_cls(root, n, rng):
    for i in range(n):
        folder = os.path.join(root, f"class{i % 10}")
        os.makedirs(folder, exist_ok=True)
        smooth_image(rng, 320, 256).save(os.path.join(folder, f"{i:05d}.jpg"), quality=90)
    return root


def write_det(root, n, rng):
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    images, anns = [], []
    for i in range(n):
        name = f"{i:05d}.jpg"
        smooth_image(rng, 640, 480).save(os.path.join(root, "images", name), quality=90)
        images.append({"id": i + 1, "file_name": name, "width": 640, "height": 480})
        for _ in range(rng.integers(3, 9)):
            w, h = rng.uniform(20, 200, 2)
            x, y = rng.uniform(0, 640 - w), rng.uniform(0, 480 - h)
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(rng.integers(1, 6)),
                         "bbox": [float(x), float(y), float(w), float(h)], "area": float(w * h), "iscrowd": 0})
    cats = [{"id": c, "name": f"cat{c}"} for c in range(1, 6)]
    ann_file = os.path.join(root, "ann.json")
    with open(ann_file, "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)
    return ann_file, os.path.join(root, "images")


def loader_cfg(batch_size, workers):
    return {"batch_size": batch_size, "test_batch_size": None, "num_workers": workers, "pin_memory": False,
            "persistent_workers": False, "prefetch_factor": None, "drop_last": False}


def up_cls(root, workers):
    transforms = [{"type": "RandomResizedCrop", "kwargs": {"size": 224, "antialias": True}},
                  {"type": "RandomHorizontalFlip"}, {"type": "Normalize", "kwargs": {"mean": MEAN, "std": STD}}]
    data = build_dataset({"type": "image_folder", "kwargs": {"root": root, "transforms": transforms}}, "cls")
    return LoaderFactory(loader_cfg(32, workers), data, None, seed=0).train_loader(1)


def bare_cls(root, workers):
    from torchvision import datasets
    from torchvision.transforms import v2

    tf = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                     v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    return DataLoader(datasets.ImageFolder(root, transform=tf), batch_size=32, shuffle=True, num_workers=workers)


def up_det(ann_file, img_dir, workers):
    transforms = [{"type": "keep_ar_resize_max", "kwargs": {"scales": [640], "max_size": 1066}},
                  {"type": "flip", "kwargs": {"flip_p": 0.5}}]
    data = build_dataset({"type": "coco", "kwargs": {"ann_file": ann_file, "img_dir": img_dir,
                                                      "transforms": transforms}}, "det")
    return LoaderFactory(loader_cfg(8, workers), data, None, seed=0).train_loader(1)


YOLOX_TRANSFORMS = [
    {"type": "mosaic", "kwargs": {"extra_input": True, "tar_size": 640, "fill_color": 0}},
    {"type": "random_perspective_yolox", "kwargs": {"degrees": 10.0, "translate": 0.1, "scale": [0.1, 2.0],
                                                    "shear": 2.0, "perspective": 0.0, "fill_color": 0,
                                                    "border": [-320, -320]}},
    {"type": "yolox_mixup_cv2", "kwargs": {"extra_input": True, "input_size": [640, 640],
                                           "mixup_scale": [0.8, 1.6], "fill_color": 0}},
    {"type": "augment_hsv", "kwargs": {"hgain": 0.015, "sgain": 0.7, "vgain": 0.4, "color_mode": "BGR"}},
    {"type": "flip", "kwargs": {"flip_p": 0.5}},
    {"type": "keep_ar_resize_max", "kwargs": {"random_size": [15, 25], "scale_step": 32, "padding_type": "left_top",
                                              "padding_val": 0}},
    {"type": "custom_to_tensor"},
]


def up_yolox(ann_file, img_dir, workers):
    data = build_dataset({"type": "coco", "kwargs": {"ann_file": ann_file, "img_dir": img_dir,
                                                      "transforms": YOLOX_TRANSFORMS}}, "yolox")
    return LoaderFactory(loader_cfg(8, workers), data, None, seed=0).train_loader(1)


def _list_collate(samples):
    return tuple(zip(*samples))


def bare_det(ann_file, img_dir, workers):
    from torchvision import datasets
    from torchvision.transforms import v2

    tf = v2.Compose([v2.ToImage(), v2.Resize(640, max_size=1066, antialias=True), v2.RandomHorizontalFlip(),
                     v2.ToDtype(torch.float32, scale=True)])
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools reports its index building
        coco = datasets.CocoDetection(img_dir, ann_file, transforms=tf)
    data = datasets.wrap_dataset_for_transforms_v2(coco, target_keys=("boxes", "labels", "image_id"))
    return DataLoader(data, batch_size=8, shuffle=True, num_workers=workers, collate_fn=_list_collate)


def one_pass(make_loader):
    """(images/s, images) of one pass over a fresh loader, worker start-up included."""
    start = time.perf_counter()
    n = 0
    for batch in make_loader():
        images = batch["image"] if isinstance(batch, dict) else batch[0]
        n += len(images)
    return n / (time.perf_counter() - start), n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cls-images", type=int, default=256)
    ap.add_argument("--det-images", type=int, default=64)
    ap.add_argument("--pipelines", nargs="+", default=["cls", "det", "yolox"], choices=["cls", "det", "yolox"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    import logging

    logging.getLogger("up").setLevel(logging.WARNING)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        cls_root = write_cls(os.path.join(tmp, "cls"), args.cls_images, rng)
        ann_file, img_dir = write_det(os.path.join(tmp, "det"), args.det_images, rng)
        pipelines = {
            "cls": {"up": lambda w: up_cls(cls_root, w), "bare": lambda w: bare_cls(cls_root, w)},
            "det": {"up": lambda w: up_det(ann_file, img_dir, w), "bare": lambda w: bare_det(ann_file, img_dir, w)},
            "yolox": {"up": lambda w: up_yolox(ann_file, img_dir, w)},
        }
        print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.rounds} rounds; images/s (median), "
              f"one pass per measurement with worker start-up")
        print(f"{'pipeline':<9}{'workers':>8}{'bare im/s':>11}{'up im/s':>10}{'up/bare':>9}")  # images/s: above 1 is up faster
        for task, loops in ((t, pipelines[t]) for t in args.pipelines):
            for workers in args.workers:
                rates = {name: [] for name in loops}
                for r in range(args.rounds):
                    for loop in (("bare", "up") if r % 2 == 0 else ("up", "bare")):
                        if loop in loops:
                            rate, _ = one_pass(lambda: loops[loop](workers))
                            rates[loop].append(rate)
                med = {k: statistics.median(v) for k, v in rates.items()}
                if "bare" in med:
                    print(f"{task:<9}{workers:>8}{med['bare']:>11.1f}{med['up']:>10.1f}"
                          f"{med['up'] / med['bare']:>9.3f}", flush=True)
                else:
                    print(f"{task:<9}{workers:>8}{'-':>11}{med['up']:>10.1f}{'-':>9}", flush=True)


if __name__ == "__main__":
    main()
