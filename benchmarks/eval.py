"""COCO evaluation cost: up's `COCO` evaluator against pycocotools alone, on the same detections.

    python benchmarks/eval.py [--images 1000] [--repeats 3]

Ground truth comes from generated digit scenes (`digits_det`); detections are the true boxes
jittered, with seeded random scores and false positives, so AP is neither 0 nor 1. `up` covers
what the trainer does after the forward passes: `process` per batch, `results`, `evaluate`
(conversion to COCO, COCOeval, per-class table). `pycocotools` is COCO + loadRes + COCOeval on
prepared dicts. Runs alternate; medians are printed with the ratio, and both must give the same AP.
"""
import argparse
import contextlib
import io
import logging
import statistics
import time

import torch

from up_trainer.registry import DATASETS, EVALUATORS


def make_batches(n_images, batch_size=32, seed=0):
    ds = DATASETS.build({"type": "digits_det", "kwargs": {"split": "val", "num_images": n_images}})
    g = torch.Generator().manual_seed(seed)
    batches = []
    for start in range(0, n_images, batch_size):
        samples = [ds[i] for i in range(start, min(start + batch_size, n_images))]
        batch = ds.collate_fn(samples)
        dets = []
        for t in batch["target"]:
            boxes = t["boxes"] + torch.randn(t["boxes"].shape, generator=g) * 1.5
            extra = torch.rand(3, 2, generator=g) * 40
            fp = torch.cat([extra, extra + 8 + torch.rand(3, 2, generator=g) * 10], dim=1)
            labels = torch.cat([t["labels"], torch.randint(1, 11, (3,), generator=g)])
            dets.append({"boxes": torch.cat([boxes, fp]), "labels": labels,
                         "scores": torch.rand(len(labels), generator=g)})
        batches.append((batch, {"detections": dets}))
    return batches


def run_up(batches):
    ev = EVALUATORS.build({"type": "COCO"})
    ev.reset()
    for batch, outputs in batches:
        ev.process(batch, outputs)
    return ev.evaluate(ev.results())["bbox.AP"]


def prepare_plain(batches):
    """The dicts a pycocotools user would have built anyway (not timed)."""
    ev = EVALUATORS.build({"type": "COCO"})
    for batch, outputs in batches:
        ev.process(batch, outputs)
    return ev.to_coco(ev.results())


def run_pycocotools(gt_dict, dets):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = gt_dict
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(dets), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    logging.getLogger("up").setLevel(logging.WARNING)
    batches = make_batches(args.images)
    gt_dict, dets = prepare_plain(batches)
    times = {"up": [], "pycocotools": []}
    for _ in range(args.repeats):
        t = time.perf_counter()
        ap_up = run_up(batches)
        times["up"].append(time.perf_counter() - t)
        t = time.perf_counter()
        ap_ref = run_pycocotools(gt_dict, dets)
        times["pycocotools"].append(time.perf_counter() - t)
    up, ref = statistics.median(times["up"]), statistics.median(times["pycocotools"])
    print(f"{args.images} images, {len(dets)} detections")
    print(f"{'evaluator':<14}{'median s':>10}{'bbox AP':>10}")
    print(f"{'pycocotools':<14}{ref:>10.3f}{ap_ref:>10.4f}")
    print(f"{'up COCO':<14}{up:>10.3f}{ap_up:>10.4f}")
    print(f"ratio up / pycocotools: {up / ref:.3f}; same AP: {abs(ap_up - ap_ref) < 1e-9}")


if __name__ == "__main__":
    main()
