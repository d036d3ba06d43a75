"""bf16 autocast vs fp32: training step time on CPU for the digits demo model.

    python benchmarks/amp_bf16.py [--config configs/cls/digits_resnet18.yaml] [--rounds 7] [--steps 5]

Both variants run the same code path (up_trainer's Optimization: autocast, backward, step)
on the same real digits batches, from identical initial weights. Rounds alternate
fp32 / bf16 so that load from other processes hits both alike; medians are reported.
"""
import argparse
import os
import statistics
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(cfg, amp):
    from up_trainer.engine.optim import Optimization
    from up_trainer.tasks.net import build_model

    torch.manual_seed(0)
    model = build_model(cfg["net"])
    runtime = dict(cfg["runtime"], fp16=False, amp={"enable": True, "dtype": "bfloat16"} if amp else {})
    trainer_cfg = dict(cfg["trainer"], lr_scheduler=None)
    return model, Optimization(model, trainer_cfg, runtime, torch.device("cpu"), 100)


def step(model, optim, batch):
    with optim.autocast():
        out = model(batch)
    optim.backward(out["loss"])
    optim.step()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=os.path.join(REPO, "configs/cls/digits_resnet18.yaml"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per round and variant")
    args = ap.parse_args()
    from up_trainer.engine.allocator import tune_malloc

    print(tune_malloc())  # as `up train` does (runtime.tune_malloc): the allocator the trainer runs with

    import logging

    logging.getLogger("up").setLevel(logging.WARNING)
    from torch.utils.data import DataLoader

    from up_trainer.config import resolve_config
    from up_trainer.engine.builder import build_dataset

    cfg = resolve_config(args.config)
    ds = build_dataset(cfg["dataset"]["train"], "dataset.train")
    loader = DataLoader(ds, batch_size=cfg["dataset"]["batch_size"], shuffle=False, drop_last=True)
    batches = [b for _, b in zip(range(args.steps), loader)]
    variants = {"fp32": build(cfg, False), "bf16": build(cfg, True)}
    for model, optim in variants.values():  # warm-up: allocator, kernels, lazy init
        model.train()
        step(model, optim, batches[0])
    times = {k: [] for k in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            model, optim = variants[name]
            t0 = time.perf_counter()
            for b in batches:
                step(model, optim, b)
            times[name].append((time.perf_counter() - t0) / len(batches))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"model {cfg['net'].get('type')} batch {cfg['dataset']['batch_size']} on CPU, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {args.rounds} rounds x {args.steps} steps")
    for k, v in med.items():
        print(f"  {k}: median step {v * 1000:.1f} ms  (min {min(times[k]) * 1000:.1f}, max {max(times[k]) * 1000:.1f})")
    print(f"bf16 / fp32 step time ratio: {med['bf16'] / med['fp32']:.2f}")


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    main()
