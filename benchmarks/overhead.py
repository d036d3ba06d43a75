"""Trainer overhead against a bare PyTorch loop, measured side by side in one process.

    python benchmarks/overhead.py [--epochs 3] [--repeats 3] [--config configs/cls/digits_resnet18.yaml]

Both loops train the same model (built by the same code from the same seed) on the same data in
the same order, evaluate after every epoch and save a checkpoint (model + optimizer) after every
epoch plus the best one — what a hand-written loop does. The trainer runs with its default hooks
(train_val_logger, auto_checkpoint, auto_save_best). Runs alternate; medians are printed, with
whether the final weights are bitwise equal. Target: trainer <= 1.01 x bare + 10 ms per epoch.
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
from up_trainer.engine.builder import build_dataset, build_trainer
from up_trainer.engine.rng import seed_everything
from up_trainer.run import setup_logging
from up_trainer.tasks.net import build_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_cfg(path, epochs):
    # No augmentation: a bare loop has no per-batch seeding to match random transforms with.
    return resolve_config(path, [f"trainer.max_epoch={epochs}", "trainer.lr_scheduler=null",
                                 "dataset.train.kwargs.transforms=null", "dataset.num_workers=0"])


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
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = load_cfg(args.config, args.epochs)
    setup_logging(None, is_main=False)  # the trainer's log lines are written, not shown
    times = {"bare": [], "up": []}
    equal = None
    for _ in range(args.repeats):
        tb, wb = timed(bare_loop, cfg)
        tu, wu = timed(trainer_loop, cfg)
        times["bare"].append(tb)
        times["up"].append(tu)
        equal = all(torch.equal(wb[k], wu[k]) for k in wb) if equal is not False else False
    bare, up = statistics.median(times["bare"]), statistics.median(times["up"])
    per_epoch_extra_ms = (up - bare) / args.epochs * 1e3
    print(f"{'loop':<8}{'s / epoch (median)':>20}")
    print(f"{'bare':<8}{bare / args.epochs:>20.3f}")
    print(f"{'up':<8}{up / args.epochs:>20.3f}")
    print(f"ratio up / bare: {up / bare:.4f}   extra per epoch: {per_epoch_extra_ms:+.1f} ms")
    print(f"final weights bitwise equal: {equal}")
    budget = bare * 1.01 + 0.010 * args.epochs
    print(f"target up <= 1.01 x bare + 10 ms/epoch: {'OK' if up <= budget else 'ABOVE TARGET'}")


if __name__ == "__main__":
    main()
