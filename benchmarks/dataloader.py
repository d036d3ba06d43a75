"""Input pipelines on the CPU: images/s of up's loaders (decode + transforms + collate + the
conversion to the model's float input) per DataLoader worker count, against a bare torchvision
pipeline, without and with the image cache; and the detection demo's training speed end to end.

    python benchmarks/dataloader.py [--workers 0 1 2] [--rounds 3] [--cls-images 256] [--det-images 64]
                                    [--pipelines cls det improve yolox] [--no-cache]
    python benchmarks/dataloader.py --e2e [--e2e-images 400] [--e2e-workers 0 2] [--before TREE] [--rounds 3]
    python benchmarks/dataloader.py --settings [--rounds 3]      # persistent workers, prefetch_factor
    python benchmarks/dataloader.py --epoch2 --pipelines det     # epoch 2 as a run has it, cache on / off

The data are JPEG files written to a temporary directory first: ``cls`` 10 class folders of
320x256 images, ``det`` a COCO instances file with 640x480 images and 3-8 boxes each.

- ``cls`` up: ``image_folder``, RandomResizedCrop(224) + RandomHorizontalFlip + Normalize, up's
  LoaderFactory (per-batch seeding, resumable sampler, collate), batch 32. Bare:
  ``torchvision.datasets.ImageFolder`` reading with ``torchvision.io.decode_image`` (uint8), the
  same v2 transforms on uint8, ``ToDtype(float32, scale=True)`` + Normalize at the end,
  ``DataLoader(shuffle=True)``, batch 32.
- ``det`` up: ``coco``, keep_ar_resize_max(scales [640], max_size 1066) + flip, batch 8. Bare:
  ``torchvision.datasets.CocoDetection`` (uint8 decode) wrapped for transforms v2, Resize(640,
  max_size=1066) + RandomHorizontalFlip + ToDtype(float32, scale=True), a list collate.
- ``improve`` up only: the det data through UP's improve augmentations (stitch_expand 2.0 at
  p 0.5, crop at p 0.5, fix_output_resize 640x640, flip, to_tensor, normalize), batch 8.
- ``yolox`` up only: the det data through UP's yolox_small training pipeline (mosaic 640,
  random_perspective_yolox border -320, yolox_mixup_cv2 640, augment_hsv, flip,
  keep_ar_resize_max random_size [15, 25] x 32 left_top, custom_to_tensor), batch 8; each image
  decodes 5 (4 mosaic + 1 mixup).

up's batches are converted as with ``dataset.normalize_on: device`` (the default on an
accelerator): the workers send uint8 batches and the main process converts them
(``batch_to_model``: uint8 to float and the normalization), standing in for the accelerator, so
both sides deliver float model input. ``--normalize-on workers`` (or ``auto``, what ``up train``
picks on the machine: workers on a CPU-only one) converts in the workers instead.
Columns ``ram e1`` / ``ram e2``: up with ``dataset.cache: ram``, the pass that fills the cache
(epoch 1) and the next one (epoch 2, no decoding); ``e2/up`` is the cache's gain.

Each measurement is one full pass over the data with a fresh DataLoader (its worker start-up
included, as an epoch without persistent workers has it). The loops of a (pipeline, worker
count) run interleaved, their order rotating every round; medians over ``--rounds`` rounds. One
intra-op thread in the main process and in every worker (as torch sets in workers), so worker
counts compare processes. ``--epoch2``: the second epoch of one loader with persistent workers
(a run's default with workers and more than one epoch), uncached against ``cache: ram``, so
neither includes worker start-up. ``--e2e``: see benchmarks/dataloader_e2e.py.

The yolox row has no bare loop; its reference is the float32 pipeline of before the uint8 samples:
benchmarks/dataloader_trees.py runs this script of that checkout and of this one alternately
(images/s), and benchmarks/pipeline_stages.py times each step of the pipeline on uint8 and on
float images in one process (CPU time per sample).
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

from up_trainer.data.context import DataContext, resolve_normalize_on  # noqa: E402
from up_trainer.data.image_cache import open_image_cache  # noqa: E402
from up_trainer.data.loader import LoaderFactory, end_loader_workers  # noqa: E402
from up_trainer.data.model_input import convert_batch  # noqa: E402
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


# -- up ------------------------------------------------------------------------------------------
CLS_TRANSFORMS = [{"type": "RandomResizedCrop", "kwargs": {"size": 224, "antialias": True}},
                  {"type": "RandomHorizontalFlip"}, {"type": "Normalize", "kwargs": {"mean": MEAN, "std": STD}}]
DET_TRANSFORMS = [{"type": "keep_ar_resize_max", "kwargs": {"scales": [640], "max_size": 1066}},
                  {"type": "flip", "kwargs": {"flip_p": 0.5}}]
IMPROVE_TRANSFORMS = [
    {"type": "stitch_expand", "kwargs": {"expand_ratios": 2.0, "expand_prob": 0.5}},
    {"type": "crop", "kwargs": {"means": [123.675, 116.28, 103.53], "crop_prob": 0.5}},
    {"type": "fix_output_resize", "kwargs": {"scales": [640, 640]}},
    {"type": "flip", "kwargs": {"flip_p": 0.5}},
    {"type": "to_tensor"},
    {"type": "normalize", "kwargs": {"mean": MEAN, "std": STD}},
]
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


WORKER_TRANSPORT = ["ring"]  # dataset.worker_transport of up's loaders (--worker-transport)
CONTEXT = [DataContext()]  # the DataContext up's data sets are built with (--normalize-on)


def loader_cfg(batch_size, workers, persistent=False):
    return {"batch_size": batch_size, "test_batch_size": None, "num_workers": workers, "pin_memory": False,
            "persistent_workers": persistent and workers > 0, "prefetch_factor": None, "drop_last": False,
            "worker_transport": WORKER_TRANSPORT[0]}


def up_dataset(task, paths):
    if task == "cls":
        return build_dataset({"type": "image_folder", "kwargs": {"root": paths["cls"], "transforms": CLS_TRANSFORMS}},
                             "cls", CONTEXT[0])
    transforms = {"det": DET_TRANSFORMS, "improve": IMPROVE_TRANSFORMS, "yolox": YOLOX_TRANSFORMS}[task]
    ann_file, img_dir = paths["det"]
    return build_dataset({"type": "coco", "kwargs": {"ann_file": ann_file, "img_dir": img_dir,
                                                      "transforms": transforms}}, task, CONTEXT[0])


def up_passes(task, paths, workers, cache, persistent=False):
    """Loaders for epochs 1, 2, ... of one up data set (with ``cache: ram`` its arena is planned
    here, once, as a run does at start-up; ``persistent``: one loader whose workers serve every
    epoch, a run's default with workers and more than one epoch)."""
    data = up_dataset(task, paths)
    if cache:  # as the run's builder does: the data set reads through it (its workers inherit it)
        data.use_context(CONTEXT[0].with_cache(open_image_cache({"cache": "ram"}, [("dataset.train", data)])))
    factory = LoaderFactory(loader_cfg(32 if task == "cls" else 8, workers, persistent), data, None, seed=0)
    return lambda epoch: factory.train_loader(epoch)


# -- bare torchvision ------------------------------------------------------------------------------
def read_uint8(path):
    from torchvision.io import ImageReadMode, decode_image

    return decode_image(path, mode=ImageReadMode.RGB)


def bare_cls(root, workers):
    from torchvision import datasets
    from torchvision.transforms import v2

    tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                     v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    data = datasets.ImageFolder(root, transform=tf, loader=read_uint8)
    return DataLoader(data, batch_size=32, shuffle=True, num_workers=workers)


def _list_collate(samples):
    return tuple(zip(*samples))


def bare_det(ann_file, img_dir, workers):
    from torchvision import datasets
    from torchvision.transforms import v2

    tf = v2.Compose([v2.ToImage(), v2.Resize(640, max_size=1066, antialias=True), v2.RandomHorizontalFlip(),
                     v2.ToDtype(torch.float32, scale=True)])

    class UInt8Coco(datasets.CocoDetection):
        def _load_image(self, id):
            return read_uint8(os.path.join(self.root, self.coco.loadImgs(id)[0]["file_name"]))

    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools reports its index building
        coco = UInt8Coco(img_dir, ann_file, transforms=tf)
    data = datasets.wrap_dataset_for_transforms_v2(coco, target_keys=("boxes", "labels", "image_id"))
    return DataLoader(data, batch_size=8, shuffle=True, num_workers=workers, collate_fn=_list_collate)


# -- measuring -------------------------------------------------------------------------------------
def one_pass(loader):
    """images/s of one pass over a fresh loader, worker start-up and up's model-input step included."""
    start = time.perf_counter()
    n = 0
    for batch in loader:
        if isinstance(batch, dict):
            batch = convert_batch(batch)
            images = batch["image"]
        else:
            images = batch[0]
        n += len(images)
    return n / (time.perf_counter() - start)


def measure(task, paths, workers, rounds, with_cache):
    """{loop: [images/s per round]}: bare (cls, det), up, and up with cache: ram (its epochs 1, 2)."""
    loops = (["bare"] if task in ("cls", "det") else []) + ["up"] + (["ram"] if with_cache else [])
    rates = {"bare": [], "up": [], "ram e1": [], "ram e2": []}
    for r in range(rounds):
        for loop in loops[r % len(loops):] + loops[:r % len(loops)]:
            if loop == "bare":
                make = bare_cls if task == "cls" else bare_det
                rates["bare"].append(one_pass(make(paths["cls"], workers) if task == "cls" else
                                              make(*paths["det"], workers)))
            elif loop == "up":
                rates["up"].append(one_pass(up_passes(task, paths, workers, cache=False)(1)))
            else:
                epochs = up_passes(task, paths, workers, cache=True)
                rates["ram e1"].append(one_pass(epochs(1)))
                rates["ram e2"].append(one_pass(epochs(2)))
    return {k: statistics.median(v) for k, v in rates.items() if v}


def measure_epoch2(task, paths, workers, rounds):
    """{loop: [images/s of epoch 2 per round]} as a run has its second epoch: one loader with
    persistent workers (the default with workers and more than one epoch), without the cache
    (``up``) and with ``cache: ram`` (``ram``, filled by epoch 1)."""
    rates = {"up": [], "ram": []}
    loops = list(rates)
    for r in range(rounds):
        for loop in loops[r % 2:] + loops[:r % 2]:
            epochs = up_passes(task, paths, workers, cache=loop == "ram", persistent=True)
            one_pass(epochs(1))
            rates[loop].append(one_pass(epochs(2)))
            del epochs
            end_loader_workers()
    return {k: statistics.median(v) for k, v in rates.items()}


def loader_settings(paths, rounds, epochs=3):
    """Seconds for ``epochs`` passes of the cls and det loaders at 2 workers: persistent workers
    off / on (DataLoader's default prefetch_factor 2), and prefetch_factor 4 with them."""
    settings = [("fresh workers each epoch", False, None), ("persistent_workers", True, None),
                ("persistent, prefetch_factor 4", True, 4)]
    print(f"loader settings, 2 workers, {epochs} epochs per measurement (seconds, median of {rounds})")
    for task in ("cls", "det"):
        times = {name: [] for name, _, _ in settings}
        for r in range(rounds):
            for name, persistent, prefetch in settings[r % 3:] + settings[:r % 3]:
                cfg = dict(loader_cfg(32 if task == "cls" else 8, 2), persistent_workers=persistent,
                           prefetch_factor=prefetch)
                factory = LoaderFactory(cfg, up_dataset(task, paths), None, seed=0)
                start = time.perf_counter()
                for epoch in range(1, epochs + 1):
                    one_pass(factory.train_loader(epoch))
                times[name].append(time.perf_counter() - start)
                del factory
        base = statistics.median(times[settings[0][0]])
        print(f"  {task}: " + ", ".join(f"{name} {statistics.median(t):.2f} s ({statistics.median(t) / base:.2f})"
                                        for name, t in times.items()), flush=True)


def cell(value, fmt):
    return format(value, fmt) if value is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cls-images", type=int, default=256)
    ap.add_argument("--det-images", type=int, default=64)
    ap.add_argument("--pipelines", nargs="+", default=["cls", "det", "improve", "yolox"],
                    choices=["cls", "det", "improve", "yolox"])
    ap.add_argument("--no-cache", action="store_true", help="skip the cache: ram columns")
    ap.add_argument("--normalize-on", default="device", choices=["auto", "device", "workers"],
                    help="dataset.normalize_on of up's loaders (default device: uint8 batches, converted in the "
                    "main process as a stand-in for the accelerator; auto: what up train picks here)")
    ap.add_argument("--worker-transport", default="ring", choices=["ring", "torch"],
                    help="dataset.worker_transport of up's loaders (torch: DataLoader's own way, as before the ring)")
    ap.add_argument("--e2e", action="store_true", help="only the detection demo's epoch-2 images/s (dataloader_e2e.py)")
    ap.add_argument("--e2e-images", type=int, default=400, help="training scenes of the end-to-end runs")
    ap.add_argument("--e2e-workers", type=int, nargs="+", default=[0, 2])
    ap.add_argument("--before", default=None, help="an older checkout of the project: its figure as 'before'")
    ap.add_argument("--epoch2", action="store_true", help="only the second epoch as a run has it (persistent "
                    "workers), uncached and with cache: ram")
    ap.add_argument("--settings", action="store_true", help="only the loader settings: persistent workers, "
                    "prefetch_factor (cls and det, 2 workers)")
    args = ap.parse_args()
    if args.e2e:
        from dataloader_e2e import run_e2e

        return run_e2e(args.e2e_images, args.e2e_workers, args.before, args.rounds)
    torch.set_num_threads(1)
    WORKER_TRANSPORT[0] = args.worker_transport
    CONTEXT[0] = DataContext(normalize_on=resolve_normalize_on(args.normalize_on,
                                                               "cuda" if torch.cuda.is_available() else "cpu"))
    import logging

    logging.getLogger("up").setLevel(logging.WARNING)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"cls": write_cls(os.path.join(tmp, "cls"), args.cls_images, rng),
                 "det": write_det(os.path.join(tmp, "det"), args.det_images, rng)}
        if args.settings:
            return loader_settings(paths, args.rounds)
        if args.epoch2:
            print(f"epoch 2 with persistent workers, load average {os.getloadavg()[0]:.1f}, {args.rounds} rounds, "
                  f"normalize_on {CONTEXT[0].normalize_on}, worker_transport {args.worker_transport}; images/s (median)")
            print("".join(f"{h:>9}" if i else f"{h:<9}" for i, h in enumerate(("pipeline", "workers", "up e2",
                                                                                "ram e2", "ram/up"))))
            for task in args.pipelines:
                for workers in args.workers:
                    m = measure_epoch2(task, paths, workers, args.rounds)
                    row = [task, str(workers), f"{m['up']:.1f}", f"{m['ram']:.1f}", f"{m['ram'] / m['up']:.2f}"]
                    print("".join(f"{c:>9}" if i else f"{c:<9}" for i, c in enumerate(row)), flush=True)
            return print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
        print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
              f"{args.rounds} rounds, normalize_on {CONTEXT[0].normalize_on}, worker_transport {args.worker_transport}; "
              "images/s (median), one pass per measurement "
              "with worker start-up")
        head = ("pipeline", "workers", "bare", "up", "up/bare", "ram e1", "ram e2", "e2/up", "e2/bare")
        print("".join(f"{h:>9}" if i else f"{h:<9}" for i, h in enumerate(head)))
        for task in args.pipelines:
            for workers in args.workers:
                m = measure(task, paths, workers, args.rounds, not args.no_cache)
                bare, up, e1, e2 = m.get("bare"), m["up"], m.get("ram e1"), m.get("ram e2")
                row = [task, str(workers), cell(bare, ".1f"), cell(up, ".1f"), cell(bare and up / bare, ".3f"),
                       cell(e1, ".1f"), cell(e2, ".1f"), cell(e2 and e2 / up, ".2f"),
                       cell(bare and e2 and e2 / bare, ".2f")]
                print("".join(f"{c:>9}" if i else f"{c:<9}" for i, c in enumerate(row)), flush=True)
        print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
