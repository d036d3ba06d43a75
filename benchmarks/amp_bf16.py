"""Mixed precision vs fp32: training step time on CPU for the digits demo model, with the CPU
flags and the precision decision `up train` takes on this machine.

    python benchmarks/amp_bf16.py [--config configs/cls/digits_resnet18.yaml] [--rounds 7] [--steps 5]

Variants: fp32; bf16 and fp16 autocast forced (``runtime.amp.force: true``: what the dtype
costs on this CPU); and ``runtime.fp16: true`` as `up train` decides it here (fp32 when the CPU
has no native fp16). All run the same code path (up_trainer's Optimization: autocast, backward,
step) on the same real digits batches from identical initial weights. Rounds rotate the order
so that load from other processes hits all alike; medians are reported, as ratios to fp32.
"""
import argparse
import os
import statistics
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


VARIANTS = {
    "fp32": {"fp16": False, "amp": {}},
    "bf16 forced": {"fp16": False, "amp": {"enable": True, "dtype": "bfloat16", "force": True}},
    "fp16 forced": {"fp16": False, "amp": {"enable": True, "dtype": "float16", "force": True}},
    "runtime.fp16 as decided": {"fp16": True, "amp": {}},
}


def build(cfg, runtime):
    from up_trainer.engine.optim import Optimization
    from up_trainer.engine.schedule import Schedule
    from up_trainer.tasks.net import build_model

    torch.manual_seed(0)
    model = build_model(cfg["net"])
    trainer_cfg = dict(cfg["trainer"], lr_scheduler=None)
    return model, Optimization(model, trainer_cfg, dict(cfg["runtime"], **runtime), torch.device("cpu"),
                              Schedule(trainer_cfg, 100))


def hardware_report():
    """The CPU, its mixed-precision flags and what `up train` decides for each dtype here."""
    import platform

    from up_trainer.engine.precision import NATIVE_CPU_FLAGS, cpu_flags, cpu_native

    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    wanted = {f for flags in NATIVE_CPU_FLAGS.values() for f in flags}
    have = sorted(wanted & cpu_flags())
    lines = [f"cpu: {model} ({platform.machine()}), torch capability {torch.backends.cpu.get_cpu_capability()}, "
             f"mixed-precision flags: {', '.join(have) or 'none'}"]
    for dtype in (torch.bfloat16, torch.float16):
        native, evidence = cpu_native(dtype)
        lines.append(f"  {str(dtype).replace('torch.', '')}: {'native' if native else 'NOT native'}: {evidence}")
    return "\n".join(lines), f"{model}; flags: {', '.join(have) or 'none'}"


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
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="V",
                    help=f"any of {list(VARIANTS)} (fp32 is always run)")
    args = ap.parse_args()
    args.variants = ["fp32"] + [v for v in args.variants if v != "fp32"]
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
    report, machine = hardware_report()
    print(report)
    variants = {name: build(cfg, rt) for name, rt in VARIANTS.items() if name in args.variants}
    for model, optim in variants.values():  # warm-up: allocator, kernels, lazy init
        model.train()
        step(model, optim, batches[0])
    times = {k: [] for k in variants}
    for r in range(args.rounds):
        names = list(variants)
        order = names[r % len(names):] + names[:r % len(names)]
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
    for k in med:
        if k != "fp32":
            print(f"{k} / fp32 step time ratio: {med[k] / med['fp32']:.2f}  [{machine}]")


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    main()
