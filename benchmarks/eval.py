"""COCO evaluation cost: up's `COCO` evaluator (each backend) against pycocotools alone, on the
same detections.

    python benchmarks/eval.py [--images 1000] [--repeats 3]

Ground truth comes from generated digit scenes (`digits_det`); detections are the true boxes
jittered, with seeded random scores and false positives, so AP is neither 0 nor 1. `up` covers
what the trainer does after the forward passes: `process` per batch, `results`, `evaluate`
(conversion to COCO, COCOeval, per-class table). `pycocotools` is COCO + loadRes + COCOeval on
prepared dicts; `faster-coco-eval` is the same on faster-coco-eval's COCO + COCOeval_faster (when
installed). `up COCO (...)` rows run the whole evaluator with that backend. Runs alternate;
medians are printed with the ratio to pycocotools alone, and every run must give the same AP.
Target: up's evaluator with faster-coco-eval <= 0.5x pycocotools alone at 1,000 images.
"""
import argparse
import contextlib
import copy
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


def run_up(batches, backend):
    ev = EVALUATORS.build({"type": "COCO", "kwargs": {"backend": backend}})
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


def run_plain(gt_dict, dets, backend="pycocotools"):
    if backend == "pycocotools":
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    else:
        from faster_coco_eval import COCO
        from faster_coco_eval import COCOeval_faster as COCOeval

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
    from up_trainer.tasks.det.coco_backend import faster_available

    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    logging.getLogger("up").setLevel(logging.WARNING)
    batches = make_batches(args.images)
    gt_dict, dets = prepare_plain(batches)
    backends = ["pycocotools"] + (["faster_coco_eval"] if faster_available() else [])
    runs = {}  # name -> (untimed setup, timed run of its result -> bbox AP)
    for b in backends:  # loadRes annotates its inputs: each run gets fresh copies, made untimed
        runs[b if b == "pycocotools" else "faster-coco-eval"] = (
            lambda: copy.deepcopy((gt_dict, dets)), lambda inputs, b=b: run_plain(*inputs, b))
    for b in backends:
        runs[f"up COCO ({b})"] = (lambda: batches, lambda inputs, b=b: run_up(inputs, b))
    times, aps = {k: [] for k in runs}, {k: [] for k in runs}
    for _ in range(args.repeats):
        for name, (setup, fn) in runs.items():
            inputs = setup()
            t = time.perf_counter()
            aps[name].append(fn(inputs))
            times[name].append(time.perf_counter() - t)
    ref = statistics.median(times["pycocotools"])
    ap_ref = aps["pycocotools"][0]
    print(f"{args.images} images, {len(dets)} detections")
    print(f"{'evaluator':<30}{'median s':>10}{'x pycoco':>10}{'bbox AP':>10}")
    for name in runs:
        med = statistics.median(times[name])
        print(f"{name:<30}{med:>10.3f}{med / ref:>10.3f}{aps[name][0]:>10.4f}")
    same = all(abs(a - ap_ref) < 1e-9 for v in aps.values() for a in v)
    print(f"same AP everywhere: {same}")
    if not faster_available():
        print("faster-coco-eval not installed: pip install faster-coco-eval")


if __name__ == "__main__":
    main()
