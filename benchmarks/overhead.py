"""Trainer overhead against a bare PyTorch loop, epoch by epoch, interleaved in one process.

    python benchmarks/overhead.py [--epochs 4] [--repeats 6] [--threads 1] [--glibc-defaults]
                                  [--config configs/cls/digits_resnet18.yaml]

Both loops train the same model (built by the same code from the same seed) on the same data in
the same order, evaluate after every epoch and save a checkpoint (model + optimizer) after every
epoch plus the best one: what a hand-written loop does. The trainer runs with its default hooks
(train_val_logger, auto_checkpoint, auto_save_best; eval_insight left out, see load_cfg).

The two loops run interleaved, one epoch each in turn: a hook at the trainer's epoch boundary
runs the bare loop's next epoch, so every up epoch is timed next to the bare epoch with the same
number, seconds apart. On a shared machine whose speed drifts by 10-20 % over minutes, ratios
of such neighbours are far steadier than ratios of whole runs measured one after the other.
The order within a pair swaps every repeat. An up epoch covers its training, evaluation and
checkpoint; its background checkpoint write is waited for before the clock stops, so it never
overlaps the bare loop's epoch (this counts the whole write against up). The rest of an up run
(building it, the end-of-run results.png) is reported apart as its fixed cost.

One intra-op thread by default: what the trainer adds is single-threaded Python work, and on a
shared 2-core machine epoch times varied by 1.2 % (coefficient of variation) with one thread
against 7.1 % with two (their synchronisation stalls whenever the other core is taken), which
would drown a 1 % target. --threads 2 measures the same with torch's default on such a machine.

`up train` sets glibc's malloc thresholds once per process (runtime.tune_malloc, see
up_trainer/engine/allocator.py); the benchmark does so before the first loop, so the bare loop
runs under the same allocator. --glibc-defaults leaves the allocator alone for both loops: their
times then depend on each process's allocation history (page faults), not on the loop code.

Target: per epoch, trainer <= 1.01 x bare + 10 ms.

The up loop includes train_val_logger's per-step gradient norm (``grad_norm: true``, on by
default; the bare loop has none). Its cost is reported on its own line as well: the median
time of one measurement (one fused torch._foreach_norm over the model's real gradients, plus
the host read a log line does) times the optimizer steps of an epoch. --grad-norm-only prints
just that line (seconds instead of minutes).
"""
import argparse
import os
import resource
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
from up_trainer.engine.trainer import sum_losses
from up_trainer.run import setup_logging
from up_trainer.tasks.net import build_model

from interleave import Stopwatch, time_calls, train_interleaved  # benchmarks/interleave.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_cfg(path, epochs, tune, threads):
    # No augmentation: a bare loop has no per-batch seeding to match random transforms with.
    # No evaluation insight either (default_hooks.insight): a bare loop draws no confusion
    # matrix; what the eval_insight hook costs per evaluation is measured on its own (README).
    return resolve_config(path, ["default_hooks.insight=null", f"trainer.max_epoch={epochs}", "trainer.lr_scheduler=null",
                                 "dataset.train.kwargs.transforms=null", "dataset.num_workers=0",
                                 f"runtime.tune_malloc={str(tune).lower()}", f"runtime.num_threads={threads}"])


def bare_epochs(cfg, out_dir, compute):
    """The loop a user would write by hand, as a generator: set-up, then one epoch per next().
    Time in the model's forward, backward and the optimizer step is also counted on ``compute``."""
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
            with compute:
                loss = model(batch)["loss"]
            with compute:
                loss.backward()
            with compute:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for batch in test_loader:
                with compute:
                    preds = model(batch)["preds"]
                correct += (preds == batch["label"]).sum().item()
                total += len(batch["label"])
        model.train()
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        torch.save(state, os.path.join(out_dir, f"epoch_{epoch}.pth"))
        if correct / total > best:
            best = correct / total
            torch.save(state, os.path.join(out_dir, "best.pth"))
        yield model


def interleaved_run(cfg, bare_first):
    """({loop: [(wall s, compute s, page faults) per epoch]}, up fixed s, {loop: final weights})"""
    with tempfile.TemporaryDirectory() as bare_dir, tempfile.TemporaryDirectory() as up_dir:
        bare_compute, up_compute = Stopwatch(), Stopwatch()
        bare = bare_epochs(cfg, bare_dir, bare_compute)
        bare_model = next(bare)
        start = time.perf_counter()
        trainer = build_trainer(cfg, work_dir=up_dir)
        time_calls(trainer.module, "forward", up_compute)  # training and evaluation forwards
        time_calls(trainer.optim, "backward", up_compute)
        time_calls(trainer.optim, "step", up_compute)  # step + zero_grad (+ the LR schedule, off here)
        watches = {"bare": bare_compute, "up": up_compute}

        def stamp(loop):  # (wall s, compute s, minor page faults) so far
            return time.perf_counter(), watches[loop].total, resource.getrusage(resource.RUSAGE_SELF).ru_minflt

        def since(loop, started):
            return tuple(now - then for now, then in zip(stamp(loop), started))

        epochs = train_interleaved(trainer, bare, bare_first, stamp, since)
        total = time.perf_counter() - start
        fixed = total - sum(epoch[0] for loop in epochs.values() for epoch in loop)
        weights = {"up": trainer.module.state_dict(), "bare": bare_model.state_dict()}
        return epochs, fixed, weights


def grad_norm_cost(cfg, reps=200):
    """(median s per gradient-norm measurement, optimizer steps per epoch, gradient tensors)."""
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = build_trainer(cfg, work_dir=run_dir)
        batch = next(iter(trainer.loaders.train_loader(1)))
        trainer.optim.backward(sum_losses(trainer.model(batch)))
        n_grads = sum(p.grad is not None for p in trainer.module.parameters())
        times = []
        for _ in range(reps + 10):  # the first ones warm the allocator up
            start = time.perf_counter()
            float(trainer.optim.grad_norm())  # what a log line reads; other steps keep the tensor
            times.append(time.perf_counter() - start)
        steps = trainer.optim.updates_per_epoch
        return statistics.median(times[10:]), steps, n_grads


def print_grad_norm_cost(cfg, epoch_s=None):
    per_call, steps, n_grads = grad_norm_cost(cfg)
    line = (f"grad_norm (logger default, {n_grads} gradient tensors): {per_call * 1e3:.3f} ms per optimizer step, "
            f"{per_call * steps * 1e3:.1f} ms per epoch of {steps} steps")
    if epoch_s:
        line += f" = {100 * per_call * steps / epoch_s:.2f} % of the median up epoch"
    print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml"))
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both loops")
    ap.add_argument("--glibc-defaults", action="store_true", help="leave malloc's thresholds alone for both loops")
    ap.add_argument("--grad-norm-only", action="store_true", help="only the cost of the per-step gradient norm")
    args = ap.parse_args()
    print(tune_malloc() if not args.glibc_defaults else "malloc left as it is: --glibc-defaults")
    setup_logging(None, is_main=False)  # the trainer's log lines are written, not shown
    torch.set_num_threads(args.threads)  # for the bare loop's set-up too; up's builder sets it as well
    cfg = load_cfg(args.config, args.epochs, not args.glibc_defaults, args.threads)
    if args.grad_norm_only:
        print_grad_norm_cost(cfg)
        return
    interleaved_run(load_cfg(args.config, 1, not args.glibc_defaults, args.threads), True)  # warm-up: first-call costs
    epochs = {"bare": [], "up": []}
    pairs, fixed = [], []
    equal = True
    for r in range(args.repeats):
        run_epochs, fixed_s, weights = interleaved_run(cfg, bare_first=r % 2 == 0)
        for loop in epochs:
            epochs[loop] += run_epochs[loop]
        pairs += [u[0] / b[0] for u, b in zip(run_epochs["up"], run_epochs["bare"])]
        fixed.append(fixed_s)
        equal = equal and all(torch.equal(weights["up"][k], weights["bare"][k]) for k in weights["up"])
    report(args, epochs, pairs, fixed, equal)
    print_grad_norm_cost(cfg, statistics.median(e[0] for e in epochs["up"]))


def report(args, epochs, pairs, fixed, equal):
    med = {loop: {part: statistics.median(e[i] if part != "rest" else e[0] - e[1] for e in epochs[loop])
                  for i, part in enumerate(("wall", "compute", "rest"))} for loop in epochs}
    print(f"{args.repeats} repeats x {args.epochs} epochs of {os.path.relpath(args.config, REPO)}, interleaved, "
          f"{args.threads} intra-op thread(s); medians over {len(pairs)} epochs per loop")
    print(f"{'loop':<6}{'epoch s':>10}{'min':>8}{'max':>8}{'compute s':>11}{'rest ms':>10}{'page faults':>13}")
    for loop in ("bare", "up"):
        walls = [e[0] for e in epochs[loop]]
        faults = statistics.median(e[2] for e in epochs[loop])
        print(f"{loop:<6}{med[loop]['wall']:>10.3f}{min(walls):>8.3f}{max(walls):>8.3f}"
              f"{med[loop]['compute']:>11.3f}{med[loop]['rest'] * 1e3:>10.1f}{faults:>13,.0f}")
    q1, median, q3 = statistics.quantiles(pairs, n=4)
    print(f"up / bare per epoch, neighbouring pairs: median {median:.4f} (quartiles {q1:.4f} - {q3:.4f})")
    print(f"everything but compute (data, evaluation bookkeeping, checkpoints, hooks): up "
          f"{(med['up']['rest'] - med['bare']['rest']) * 1e3:+.1f} ms per epoch against bare")
    print(f"compute: up / bare {med['up']['compute'] / med['bare']['compute']:.4f} (the same calls in both loops)")
    print(f"up fixed cost per run (build, results.png): {statistics.median(fixed):.2f} s")
    print(f"final weights bitwise equal: {equal}")
    ok = median <= 1.01 + 0.010 / med["bare"]["wall"]
    print(f"target per epoch up <= 1.01 x bare + 10 ms: {'OK' if ok else 'ABOVE TARGET'}")


if __name__ == "__main__":
    main()
