"""Trainer overhead against a bare PyTorch loop, epoch by epoch, interleaved in one process.

    python benchmarks/overhead.py [--epochs 4] [--repeats 6] [--threads 1] [--glibc-defaults]
                                  [--config configs/cls/digits_resnet18.yaml]

Both loops train the same model (built by the same code from the same seed) on the same data in
the same order, evaluate after every epoch and save a checkpoint (model + optimizer) after every
epoch plus the best one: what a hand-written loop does. The trainer runs with its default hooks
(train_val_logger, auto_checkpoint, auto_save_best).

The two loops run interleaved, one epoch each in turn: a hook at the trainer's epoch boundary
runs the bare loop's next epoch, so every up epoch is timed next to the bare epoch with the same
number, seconds apart. On a shared machine whose speed drifts by 10-20 % over minutes, ratios
of such neighbours are far steadier than ratios of whole runs measured one after the other.
The order within a pair swaps every repeat. An up epoch covers its training, evaluation and
checkpoint; its background checkpoint write is waited for before the clock stops, so it never
overlaps the bare loop's epoch (this counts the whole write against up). The rest of an up run
(building it, the end-of-run results.png) is reported apart as its fixed cost.

One intra-op thread by default: what the trainer adds is single-threaded Python work, and on a
shared 2-core machine one thread's epoch times vary by about 1 % where two threads' vary by
about 7 % (their synchronisation stalls whenever the other core is taken), which would drown a
1 % target. --threads 2 measures the same with torch's default on such a machine.

`up train` sets glibc's malloc thresholds once per process (runtime.tune_malloc, see
up_trainer/engine/allocator.py); the benchmark does so before the first loop, so the bare loop
runs under the same allocator. --glibc-defaults leaves the allocator alone for both loops: their
times then depend on each process's allocation history (page faults), not on the loop code.

Target: per epoch, trainer <= 1.01 x bare + 10 ms.
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


def load_cfg(path, epochs, tune, threads):
    # No augmentation: a bare loop has no per-batch seeding to match random transforms with.
    return resolve_config(path, [f"trainer.max_epoch={epochs}", "trainer.lr_scheduler=null",
                                 "dataset.train.kwargs.transforms=null", "dataset.num_workers=0",
                                 f"runtime.tune_malloc={str(tune).lower()}", f"runtime.num_threads={threads}"])


def bare_epochs(cfg, out_dir):
    """The loop a user would write by hand, as a generator: set-up, then one epoch per next()."""
    seed, ds = cfg["runtime"]["seed"], cfg["dataset"]
    train_set = build_dataset(ds["train"], "dataset.train")
    test_set = build_dataset(ds["test"], "dataset.test")
    seed_everything(seed)
    model = build_model(cfg["net"])
    opt_cfg = cfg["trainer"]["optimizer"]
    optimizer = getattr(torch.optim, opt_cfg["type"])(model.parameters(), **opt_cfg["kwargs"])
    test_loader = DataLoader(test_set, batch_size=ds["test_batch_size"] or ds["batch_size"])
    best = -1.0
    yield model
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
        yield model


class Interleave(Hook):
    """Runs the bare loop's epochs between the trainer's, stamping the clock around each."""

    def __init__(self, bare, bare_first):
        super().__init__()
        self.bare, self.bare_first = bare, bare_first
        self.up_times, self.bare_times = [], []
        self.up_started = None

    def _bare_epoch(self):
        start = time.perf_counter()
        next(self.bare)
        self.bare_times.append(time.perf_counter() - start)

    def _up_epoch_over(self, trainer):
        if self.up_started is not None:
            trainer.store.flush()  # its background write belongs to this epoch, not the bare one
            self.up_times.append(time.perf_counter() - self.up_started)
            if not self.bare_first:
                self._bare_epoch()

    def before_epoch(self, trainer, epoch):
        self._up_epoch_over(trainer)
        if self.bare_first:
            self._bare_epoch()
        self.up_started = time.perf_counter()

    def after_train(self, trainer):
        self._up_epoch_over(trainer)


def interleaved_run(cfg, bare_first):
    """(up epoch s list, bare epoch s list, up fixed s, final weights of both)"""
    with tempfile.TemporaryDirectory() as bare_dir, tempfile.TemporaryDirectory() as up_dir:
        bare = bare_epochs(cfg, bare_dir)
        bare_model = next(bare)
        start = time.perf_counter()
        trainer = build_trainer(cfg, work_dir=up_dir)
        clock = trainer.hooks.add(Interleave(bare, bare_first), priority="HIGHEST")
        trainer.train()
        total = time.perf_counter() - start
        fixed = total - sum(clock.up_times) - sum(clock.bare_times)
        return clock.up_times, clock.bare_times, fixed, trainer.module.state_dict(), bare_model.state_dict()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml"))
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both loops")
    ap.add_argument("--glibc-defaults", action="store_true", help="leave malloc's thresholds alone for both loops")
    args = ap.parse_args()
    print(tune_malloc() if not args.glibc_defaults else "malloc left as it is: --glibc-defaults")
    setup_logging(None, is_main=False)  # the trainer's log lines are written, not shown
    torch.set_num_threads(args.threads)  # for the bare loop's set-up too; up's builder sets it as well
    cfg = load_cfg(args.config, args.epochs, not args.glibc_defaults, args.threads)
    interleaved_run(load_cfg(args.config, 1, not args.glibc_defaults, args.threads), True)  # warm-up: first-call costs
    up, bare, pairs, fixed = [], [], [], []
    equal = True
    for r in range(args.repeats):
        up_t, bare_t, fixed_s, up_w, bare_w = interleaved_run(cfg, bare_first=r % 2 == 0)
        up += up_t
        bare += bare_t
        pairs += [u / b for u, b in zip(up_t, bare_t)]
        fixed.append(fixed_s)
        equal = equal and all(torch.equal(up_w[k], bare_w[k]) for k in up_w)
    q1, median, q3 = statistics.quantiles(pairs, n=4)
    med_up, med_bare = statistics.median(up), statistics.median(bare)
    print(f"{args.repeats} repeats x {args.epochs} epochs of {os.path.relpath(args.config, REPO)}, interleaved, "
          f"{args.threads} intra-op thread(s)")
    print(f"{'loop':<6}{'epoch s (median)':>18}{'min':>8}{'max':>8}")
    for name, times in (("bare", bare), ("up", up)):
        print(f"{name:<6}{statistics.median(times):>18.3f}{min(times):>8.3f}{max(times):>8.3f}")
    print(f"up / bare per epoch, over {len(pairs)} neighbouring pairs: median {median:.4f} "
          f"(quartiles {q1:.4f} - {q3:.4f}); ratio of medians {med_up / med_bare:.4f}, "
          f"extra {(med_up - med_bare) * 1e3:+.1f} ms")
    print(f"up fixed cost per run (build, results.png): {statistics.median(fixed):.2f} s")
    print(f"final weights bitwise equal: {equal}")
    ok = median <= 1.01 + 0.010 / med_bare
    print(f"target per epoch up <= 1.01 x bare + 10 ms: {'OK' if ok else 'ABOVE TARGET'}")


if __name__ == "__main__":
    main()
