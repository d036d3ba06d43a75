"""Trainer overhead against a bare PyTorch loop, measured side by side in one process.

    python benchmarks/overhead.py [--epochs 4] [--repeats 5] [--config configs/cls/digits_resnet18.yaml]
                                  [--glibc-defaults]

Both loops train the same model (built by the same code from the same seed) on the same data in
the same order, evaluate after every epoch and save a checkpoint (model + optimizer) after every
epoch plus the best one: what a hand-written loop does. The trainer runs with its default hooks
(train_val_logger, auto_checkpoint, auto_save_best). Each loop stamps the clock as every epoch
starts and once the last epoch's evaluation and checkpoint are done, so an epoch's time covers
its training, evaluation and checkpoint; the rest of a run (building it; for up also the
end-of-run results.png) is reported apart as the fixed cost. Runs alternate, the first loop
swapping every repeat; medians are printed, with whether the final weights are bitwise equal.
Target: per epoch, trainer <= 1.01 x bare + 10 ms.

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
from up_trainer.hooks.base import Hook
from up_trainer.run import setup_logging
from up_trainer.tasks.net import build_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_cfg(path, epochs, tune):
    # No augmentation: a bare loop has no per-batch seeding to match random transforms with.
    return resolve_config(path, [f"trainer.max_epoch={epochs}", "trainer.lr_scheduler=null",
                                 "dataset.train.kwargs.transforms=null", "dataset.num_workers=0",
                                 f"runtime.tune_malloc={str(tune).lower()}"])


def bare_loop(cfg, out_dir, stamps):
    """The loop a user would write by hand (plus the clock stamps)."""
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
        stamps.append(time.perf_counter())
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
    stamps.append(time.perf_counter())
    return model.state_dict()


class EpochClock(Hook):
    """Stamps the clock as each epoch starts and when the run's epoch work is over (first in
    after_train, before the logger draws results.png)."""

    def __init__(self, stamps):
        super().__init__()
        self.stamps = stamps

    def before_epoch(self, trainer, epoch):
        self.stamps.append(time.perf_counter())

    def after_train(self, trainer):
        self.stamps.append(time.perf_counter())


def trainer_loop(cfg, out_dir, stamps):
    trainer = build_trainer(cfg, work_dir=out_dir)
    trainer.hooks.add(EpochClock(stamps), priority="HIGHEST")
    trainer.train()
    return trainer.module.state_dict()


def timed(fn, cfg):
    """(whole run s, [epoch s, ...], final weights)"""
    stamps = []
    with tempfile.TemporaryDirectory() as d:
        start = time.perf_counter()
        weights = fn(cfg, d, stamps)
        total = time.perf_counter() - start
    return total, [b - a for a, b in zip(stamps, stamps[1:])], weights


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml"))
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--glibc-defaults", action="store_true", help="leave malloc's thresholds alone for both loops")
    args = ap.parse_args()
    print(tune_malloc() if not args.glibc_defaults else "malloc left as it is: --glibc-defaults")
    setup_logging(None, is_main=False)  # the trainer's log lines are written, not shown
    cfg = load_cfg(args.config, args.epochs, not args.glibc_defaults)
    loops = {"bare": bare_loop, "up": trainer_loop}
    timed(bare_loop, cfg)  # warm-up: first-call costs (lazy imports, allocator growth) count for neither
    epochs = {name: [] for name in loops}
    fixed = {name: [] for name in loops}
    paired = []  # per repeat: up's mean epoch / bare's mean epoch, robust to the machine's slow drifts
    equal = True
    for r in range(args.repeats):
        weights, mean_epoch = {}, {}
        for name in (("bare", "up") if r % 2 == 0 else ("up", "bare")):
            total, per_epoch, weights[name] = timed(loops[name], cfg)
            epochs[name] += per_epoch
            fixed[name].append(total - sum(per_epoch))
            mean_epoch[name] = sum(per_epoch) / len(per_epoch)
        paired.append(mean_epoch["up"] / mean_epoch["bare"])
        equal = equal and all(torch.equal(weights["bare"][k], weights["up"][k]) for k in weights["bare"])
    med = {name: statistics.median(v) for name, v in epochs.items()}
    print(f"{args.repeats} repeats x {args.epochs} epochs of {os.path.relpath(args.config, REPO)}")
    print(f"{'loop':<6}{'epoch s (median)':>18}{'min':>8}{'max':>8}{'fixed s per run':>17}")
    for name in loops:
        print(f"{name:<6}{med[name]:>18.3f}{min(epochs[name]):>8.3f}{max(epochs[name]):>8.3f}"
              f"{statistics.median(fixed[name]):>17.3f}")
    extra_ms = (med["up"] - med["bare"]) * 1e3
    print(f"per epoch: up / bare {med['up'] / med['bare']:.4f} (median epochs), "
          f"{statistics.median(paired):.4f} (median of per-repeat ratios), extra {extra_ms:+.1f} ms")
    print(f"final weights bitwise equal: {equal}")
    ok = med["up"] <= med["bare"] * 1.01 + 0.010
    print(f"target per epoch up <= 1.01 x bare + 10 ms: {'OK' if ok else 'ABOVE TARGET'}")


if __name__ == "__main__":
    main()
