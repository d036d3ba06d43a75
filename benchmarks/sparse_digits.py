"""2:4 sparsity on the digits demo: top-1 of the sparse run beside the dense one, and the
sparsity of the masked layers read back from the sparse run's final checkpoint.

    python benchmarks/sparse_digits.py [--out runs/sparse_bench] [--reuse] [--opts KEY=VALUE ...]

Trains configs/cls/digits_resnet18.yaml and configs/cls/digits_resnet18_sparse.yaml (the same
recipe plus a ``sparsity`` section) one after the other with ``up train`` in this process's
Python, then reports from the final checkpoints: top-1 of the last evaluation, the zero
fraction of each masked layer (from the weights and from the saved masks), whether every group
of 4 along the input dimension holds exactly 2 zeros, and the wall time of each run.
``--reuse`` reads runs already in ``--out`` instead of training them again.
"""
import argparse
import os
import subprocess
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # this checkout's up_trainer, as the `up train` subprocesses use
CONFIGS = {"dense": "configs/cls/digits_resnet18.yaml", "2:4 sparse": "configs/cls/digits_resnet18_sparse.yaml"}


def train(config, work_dir, opts):
    cmd = [sys.executable, "-m", "up_trainer", "train", "--config", os.path.join(REPO, config), "--work-dir",
           work_dir]
    if opts:
        cmd += ["--opts", *opts]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - start


def final_checkpoint(work_dir):
    return torch.load(os.path.join(work_dir, "checkpoints", "ckpt_latest.pth"), map_location="cpu",
                      weights_only=True)


def sparsity_of(ckpt):
    """(zeros, weights, all groups exactly 2:4) over the layers the saved masks cover."""
    from up_trainer.sparsity.masks import is_semi_structured

    masks = ckpt["hooks"]["sparsity"]["masks"]
    zeros = total = 0
    exact = True
    for name, mask in masks.items():
        weight = ckpt["model"][f"{name}.weight"]
        zeros += int((weight == 0).sum())
        total += weight.numel()
        exact &= is_semi_structured(weight != 0, 4, 2) and torch.equal(weight != 0, mask | (weight != 0))
    return zeros, total, exact, len(masks)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "runs", "sparse_bench"))
    parser.add_argument("--reuse", action="store_true", help="report runs already in --out")
    parser.add_argument("--opts", nargs="*", default=[])
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    for label, config in CONFIGS.items():
        work_dir = os.path.join(args.out, label.replace(":", "_").replace(" ", "_"))
        seconds = None if args.reuse else train(config, work_dir, args.opts)
        ckpt = final_checkpoint(work_dir)
        top1 = ckpt["state"]["metrics"].get("top1")
        line = f"{label:>11}: top-1 {top1:.2f} after epoch {ckpt['epoch']}"
        if seconds is not None:
            line += f", {seconds:.0f} s"
        if "sparsity" in (ckpt.get("hooks") or {}):
            zeros, total, exact, layers = sparsity_of(ckpt)
            line += (f"; {layers} masked layers, {zeros} of {total} weights zero ({100 * zeros / total:.2f} %), "
                     f"every group of 4 holds exactly 2 zeros: {exact}")
        print(line, flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
