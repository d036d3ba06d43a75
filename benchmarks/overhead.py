"""Trainer overhead against a bare PyTorch loop, measured side by side in one process.

    python benchmarks/overhead.py [--epochs 3] [--repeats 5] [--config configs/cls/digits_resnet18.yaml]
                                  [--glibc-defaults]

Runs of 1 and of --epochs epochs separate the per-epoch cost (the difference) from the fixed
cost of a run (building it; for up also the end-of-run results.png).

Both loops train the same model (built by the same code from the same seed) on the same data in
the same order, evaluate after every epoch and save a checkpoint (model + optimizer) after every
epoch plus the best one — what a hand-written loop does. The trainer runs with its default hooks
(train_val_logger, auto_checkpoint, auto_save_best). Runs alternate; medians are printed, with
whether the final weights are bitwise equal. Target: per epoch, trainer <= 1.01 x bare + 10 ms.

`up train` sets glibc's malloc thresholds once per process (runtime.tune_malloc, see
up_trainer/engine/allocator.py); the benchmark does so before the first loop, so the bare loop
runs under the same allocator. --glibc-defaults leaves the allocator alone for both loops: their
times then depend on each process's allocation history (page faults), not on the loop code.
"""
import argparse
import os
import statistics
import tempfile
import time

import torch
from torch.utils.data import DataLoader, default_collate

from up_trainer.config import resolve_config
from up_trainer.data.sampler import ResumableSampler
from up_trainer.engine.allocator import tune_malloc
from up_trainer.engine.builder import build_dataset, build_trainer
from up_trainer.engine.rng import seed_everything
from up_trainer.run import setup_logging
from up_trainer.tasks.net import build_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_cfg(path, epochs, tune):
    # No augmentation: a bare loop has no per-batch seeding to match random transforms with.
    return resolve_config(path, [f"trainer.max_epoch={epochs}", "trainer.lr_scheduler=null",
                                 "dataset.train.kwargs.transforms=null", "dataset.num_workers=0",
                                 f"runtime.tune_malloc={str(tune).lower()}"])


def bare_loop(cfg, out_dir):
    """The loop a user would write by hand."""
    seed, ds = cfg["runtime"]["seed"], cfg["dataset"]
    train_set = build_dataset(ds["train"], "dataset.train")
    test_set = build_dataset(ds["test"], "dataset.test")
    seed_everything(seed)
    model = build_model(cfg["net"])
    opt_cfg = cfg["trainer"]["optimizer"]
    optimizer = getattr(torch.optim, opt_cfg["type"])(model.parameters(), **opt_cfg["kwargs"])
    test_loader = DataLoader(test_set, batch_size=ds["test_batch_size"] or ds["batch_size"])
    best = -1.0
    for epoch in range(1, cfg["trainer"]["max_epoch"] + 1):
        # The same order as up's sampler: a permutation seeded by (seed, epoch).
        order = ResumableSampler(len(train_set), seed=seed)
        order.set_epoch(epoch)
        loader = DataLoader(train_set, batch_size=ds["batch_size"], sampler=list(order), collate_fn=default_collate)
        model.train()
        for batch in loader:
            loss = model(batch)["loss"]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for batch in test_loader:
                correct += (model(batch)["preds"] == batch["label"]).sum().item()
                total += len(batch["label"])
        model.train()
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        torch.save(state, os.path.join(out_dir, f"epoch_{epoch}.pth"))
        if correct / total > best:
            best = correct / total
            torch.save(state, os.path.join(out_dir, "best.pth"))
    return model.state_dict()


def trainer_loop(cfg, out_dir):
    trainer = build_trainer(cfg, work_dir=out_dir)
    trainer.train()
    return trainer.module.state_dict()


def timed(fn, cfg):
    with tempfile.TemporaryDirectory() as d:
        start = time.perf_counter()
        weights = fn(cfg, d)
        return time.perf_counter() - start, weights


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml"))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--glibc-defaults", action="store_true", help="leave malloc's thresholds alone for both loops")
    args = ap.parse_args()
    print(tune_malloc() if not args.glibc_defaults else "malloc left as it is: --glibc-defaults")
    setup_logging(None, is_main=False)  # the trainer's log lines are written, not shown
    # Runs of 1 and of --epochs epochs: the difference is the per-epoch cost, the rest is the
    # fixed cost of a run (building it; for up also the end-of-run results.png).
    lengths = (1, args.epochs)
    cfgs = {n: load_cfg(args.config, n, not args.glibc_defaults) for n in lengths}
    times = {(loop, n): [] for loop in ("bare", "up") for n in lengths}
    equal = True
    for _ in range(args.repeats):
        for n in lengths:
            tb, wb = timed(bare_loop, cfgs[n])
            tu, wu = timed(trainer_loop, cfgs[n])
            times[("bare", n)].append(tb)
            times[("up", n)].append(tu)
            equal = equal and all(torch.equal(wb[k], wu[k]) for k in wb)
    med = {k: statistics.median(v) for k, v in times.items()}
    span = args.epochs - 1
    print(f"{'loop':<6}{'run of 1 epoch s':>18}{f'run of {args.epochs} s':>16}{'per epoch s':>14}{'fixed s':>10}")
    per_epoch, fixed = {}, {}
    for loop in ("bare", "up"):
        per_epoch[loop] = (med[(loop, args.epochs)] - med[(loop, 1)]) / span
        fixed[loop] = med[(loop, 1)] - per_epoch[loop]
        print(f"{loop:<6}{med[(loop, 1)]:>18.3f}{med[(loop, args.epochs)]:>16.3f}{per_epoch[loop]:>14.3f}"
              f"{fixed[loop]:>10.3f}")
    ratio = per_epoch["up"] / per_epoch["bare"]
    extra_ms = (per_epoch["up"] - per_epoch["bare"]) * 1e3
    print(f"per epoch: up / bare {ratio:.4f}, extra {extra_ms:+.1f} ms; "
          f"fixed cost per run: up {fixed['up']:.2f} s, bare {fixed['bare']:.2f} s")
    print(f"whole {args.epochs}-epoch run: up / bare {med[('up', args.epochs)] / med[('bare', args.epochs)]:.4f}")
    print(f"final weights bitwise equal: {equal}")
    ok = per_epoch["up"] <= per_epoch["bare"] * 1.01 + 0.010
    print(f"target per epoch up <= 1.01 x bare + 10 ms: {'OK' if ok else 'ABOVE TARGET'}")


if __name__ == "__main__":
    main()
