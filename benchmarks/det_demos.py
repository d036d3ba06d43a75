"""The digits detection demos side by side, measured the same way: bbox AP / AP50 after each
epoch and the minutes of training it took, parameters and FLOPs (``up flops``), images/s of
``up predict``.

    # train the demos at the same time (same background load), then measure:
    up train --config configs/det/digits_fcos.yaml --work-dir runs/fcos &
    up train --config configs/det/digits_atss.yaml --work-dir runs/atss &
    wait
    up data digits-det --out data/digits_coco --num-images 300
    python benchmarks/det_demos.py fcos=runs/fcos atss=runs/atss --images data/digits_coco/images/val

Each NAME=RUN_DIR labels a row with NAME and reads the work dir a run trained in (its resolved
config.yaml, train.log, metrics.jsonl and checkpoints/ckpt_best.pth). Minutes
count from the run's first log line (the trainer's start, after imports) to each evaluation,
so "AP at equal minutes" is read off the rows. images/s times ``up predict`` in this process
(model loading excluded, one image at a time, PNG drawing included) over every PNG in --images.
Prints a reStructuredText table and the load average while measuring.
"""
import argparse
import datetime
import json
import os
import re
import tempfile
import time

import torch

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ")


def log_times(run_dir):
    """(start, {epoch: time of its evaluation}) from the run's train.log."""
    start, evals = None, {}
    with open(os.path.join(run_dir, "train.log"), encoding="utf-8") as f:
        for line in f:
            m = STAMP.match(line)
            if not m:
                continue
            t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
            start = start or t
            e = re.search(r" eval epoch (\d+) ", line)
            if e:
                evals[int(e.group(1))] = (t - start).total_seconds() / 60.0
    return evals


def eval_rows(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return {r["epoch"]: r for r in rows if r.get("phase") == "eval"}


def flops(cfg):
    from up_trainer.flops import flops_table

    total = flops_table(cfg).splitlines()[-1].split()
    return total[1], total[2]


def images_per_second(cfg, checkpoint, images):
    from up_trainer.predict import predict

    n = len([p for p in os.listdir(images) if p.endswith(".png")])
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        predict(cfg, checkpoint, images, out, score_thr=0.3, device="cpu")
        return n / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="NAME=RUN_DIR")
    parser.add_argument("--images", required=True, help="a folder of PNG scenes for up predict")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from up_trainer.config import resolve_config

    rows = []
    for item in args.runs:
        name, run_dir = item.split("=", 1)
        cfg = resolve_config(os.path.join(run_dir, "config.yaml"), [])
        minutes, evals = log_times(run_dir), eval_rows(run_dir)
        curve = " ".join(f"{evals[e]['bbox.AP']:.3f}@{minutes[e]:.1f}" for e in sorted(evals) if e in minutes)
        last = evals[max(evals)]
        params, gflops = flops(cfg)
        speed = images_per_second(cfg, os.path.join(run_dir, "checkpoints", "ckpt_best.pth"), args.images)
        rows.append((name, f"{last['bbox.AP']:.3f}", f"{last['bbox.AP50']:.3f}",
                     f"{minutes[max(evals)]:.1f}", params, gflops, f"{speed:.1f}", curve))
    head = ("config", "AP", "AP50", "minutes", "params", "FLOPs", "img/s", "AP@minutes after each epoch")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)
    print(rule)
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    print(rule)
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print(rule)
    print("load average while measuring: %.1f %.1f %.1f" % os.getloadavg())


if __name__ == "__main__":
    main()
