"""CPU time per sample of each step of a detection input pipeline, on the uint8 images readers
decode to and on float [0, 1] images (what readers decoded to before the uint8 samples), side by
side in one process: the two alternate sample by sample, on the same images and seeds.

    python benchmarks/pipeline_stages.py [--pipeline yolox] [--samples 48] [--rounds 3] [--images 32]

The data and pipelines are benchmarks/dataloader.py's (640x480 JPEGs with 3-8 boxes; ``yolox``:
UP's yolox_small training pipeline, each sample decoding 5 images). One thread. ``decode`` is the
decoding of every image a sample reads (the float side converts each to float32 / 255 there, as
the readers used to, keeping the decoded channels-last layout); a step that draws other images
(mosaic, yolox_mixup_cv2) includes their decoding in its own time, so ``own`` columns subtract
it. ``whole`` is the data set's ``__getitem__``. Medians over the rounds of the per-round means.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dataloader import REPO, YOLOX_TRANSFORMS, DET_TRANSFORMS, IMPROVE_TRANSFORMS, write_det  # noqa: E402

sys.path.insert(0, REPO)
from up_trainer.engine.builder import build_dataset  # noqa: E402


class Timed:
    """A pipeline step that adds its thread CPU time to ``times[name]``."""

    def __init__(self, op, name, times):
        self.op, self.name, self.times = op, name, times

    def __getattr__(self, key):
        return getattr(self.op, key)

    def __call__(self, *args, **kwargs):
        start = time.thread_time()
        out = self.op(*args, **kwargs)
        self.times[self.name] = self.times.get(self.name, 0.0) + time.thread_time() - start
        return out


def timed_dataset(ann_file, img_dir, transforms, as_float, times):
    """The coco data set of ``transforms`` whose steps and decoding add to ``times``; with
    ``as_float`` every decoded image becomes float32 in [0, 1]."""
    data = build_dataset({"type": "coco", "kwargs": {"ann_file": ann_file, "img_dir": img_dir,
                                                      "transforms": transforms}}, "det")
    ops = data.transform.transforms
    for i, op in enumerate(ops):
        ops[i] = Timed(op, type(op).__name__, times)
    load = data.load

    def timed_load(record):
        start = time.thread_time()
        image, target = load(record)
        if as_float:
            image = image.to(torch.float32).div_(255.0)
        times["decode"] = times.get("decode", 0.0) + time.thread_time() - start
        return image, target

    data.load = timed_load
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", default="yolox", choices=["det", "improve", "yolox"])
    ap.add_argument("--samples", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--images", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import logging

    logging.getLogger("up").setLevel(logging.WARNING)
    transforms = {"det": DET_TRANSFORMS, "improve": IMPROVE_TRANSFORMS, "yolox": YOLOX_TRANSFORMS}[args.pipeline]
    draws = {"Mosaic": 3, "YoloxMixUp": 1}  # images a step decodes itself
    with tempfile.TemporaryDirectory() as tmp:
        ann_file, img_dir = write_det(os.path.join(tmp, "det"), args.images, np.random.default_rng(0))
        times = {kind: {} for kind in ("uint8", "float")}
        sets = {kind: timed_dataset(ann_file, img_dir, transforms, kind == "float", times[kind]) for kind in times}
        per_round = {kind: [] for kind in times}
        for r in range(args.rounds):
            for kind in times:
                times[kind].clear()
                times[kind]["whole"] = 0.0
            for i in range(args.samples):
                for kind in (("uint8", "float") if (i + r) % 2 == 0 else ("float", "uint8")):
                    data = sets[kind]
                    torch.manual_seed(1000 * r + i)
                    data.begin_batch()
                    start = time.thread_time()
                    data[i % len(data)]
                    times[kind]["whole"] += time.thread_time() - start
                    data.end_batch()
            for kind in times:
                per_round[kind].append({k: 1000 * v / args.samples for k, v in times[kind].items()})
    print(f"{args.pipeline}: CPU ms per sample, one thread, {args.samples} samples x {args.rounds} rounds "
          f"(median of the rounds' means), load average {os.getloadavg()[0]:.1f}")
    steps = list(per_round["uint8"][0])
    images = 1 + sum(draws.values()) if args.pipeline == "yolox" else 1
    print(f"{'step':<26}{'float':>8}{'uint8':>8}{'ratio':>8}")
    for step in steps:
        values = {}
        for kind in per_round:
            own = []
            for m in per_round[kind]:
                v = m.get(step, 0.0)
                if step in draws:  # its decodes are counted in 'decode' too
                    v -= m["decode"] * draws[step] / images
                own.append(v)
            values[kind] = statistics.median(own)
        name = step + (" (own)" if step in draws else "")
        ratio = values["float"] / values["uint8"] if values["uint8"] > 0 else float("nan")
        print(f"{name:<26}{values['float']:>8.2f}{values['uint8']:>8.2f}{ratio:>8.2f}")


if __name__ == "__main__":
    main()
