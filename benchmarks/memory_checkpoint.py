"""memory_checkpoint benchmark: activation memory and step time, none / static / dynamic.

    python benchmarks/memory_checkpoint.py [--device cpu|cuda] [--steps 2] [--models resnet50,retinanet]

For each model, two input sizes alternate (a variable-size workload). Modes: none (bare
PyTorch step, no hook), static (every candidate checkpointed), dynamic at two budgets between
the static and the unchecked peak of the larger size. Memory: on CPU the bytes of the tensors
saved for backward (checkpoint inputs included); on CUDA torch.cuda.max_memory_allocated.
Step time: median wall time of the timed steps (and process CPU time on CPU). Printed as
ratios against the bare step measured in the same process.
"""
import argparse
import statistics
import sys
import time
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from up_trainer.engine.allocator import tune_malloc  # noqa: E402
from up_trainer.hooks.base import HookList  # noqa: E402
from up_trainer.memckpt import profiler  # noqa: E402
from up_trainer.registry import HOOKS, MODELS  # noqa: E402

MODELS_CFG = {
    "resnet50": dict(net={"type": "resnet50", "kwargs": {"num_classes": 10}}, sizes=(64, 112), n=4,
                     patterns={"backbone": {"patterns_mode": "level", "level": {"num": 2}}}),
    "retinanet": dict(net={"type": "retinanet", "kwargs": {"num_classes": 3, "backbone": "resnet50",
                                                         "min_size": 128, "max_size": 256, "fpn_channels": 64}},
                      sizes=(128, 192), n=2,
                      patterns={"backbone": {"patterns_mode": "level", "level": {"num": 2}},
                                "head": {"patterns_mode": "name", "share_weight_num": 5,
                                         "name_list": ["classification_head.conv", "regression_head.conv"]}}),
}


def make_batch(kind, size, n, device):
    g = torch.Generator().manual_seed(size)
    if kind == "resnet50":
        return {"image": torch.randn(n, 3, size, size, generator=g).to(device),
                "label": torch.randint(0, 10, (n,), generator=g).to(device)}
    box = torch.tensor([[size * 0.1, size * 0.1, size * 0.6, size * 0.5]])
    return {"image": [torch.rand(3, size, size, generator=g).to(device) for _ in range(n)],
            "target": [{"boxes": box.to(device), "labels": torch.tensor([1]).to(device)} for _ in range(n)]}


def run(cfg, kind, mode, device, steps, budget_gb=None, warmup=4):
    torch.manual_seed(0)
    model = MODELS.build(cfg["net"]).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    tr = types.SimpleNamespace(module=model, model=model, device=device)
    h = None
    if mode != "none":
        kwargs = {"checkpoint_patterns": cfg["patterns"]}
        if mode == "dynamic":
            kwargs["dc_cfg"] = {"warmup_iters": warmup, "max_memory": budget_gb, "strategy": "greedy", "bucket": 16}
        h = HOOKS.build({"type": "memory_checkpoint", "kwargs": kwargs})
        HookList().add(h, name="memory_checkpoint")
        h.before_train(tr)
    sizes = cfg["sizes"]
    # untimed: one step per size (allocator / kernel warmup; the dynamic hook's profiling)
    schedule = [(s, False) for s in sizes] * (warmup // len(sizes) if mode == "dynamic" else 1)
    schedule += [(s, True) for _ in range(steps) for s in sizes]
    stats = {s: {"mem": [], "wall": [], "cpu": []} for s in sizes}
    for it, (size, timed) in enumerate(schedule, 1):
        b = make_batch(kind, size, cfg["n"], device)
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(device)
        w0, c0 = time.perf_counter(), time.process_time()
        if h is not None:
            h.before_forward(tr, it, b)
        if device.type == "cpu" and (h is None or not h.dynamic):
            out, nbytes = profiler.measure(model, model, b)  # the dynamic hook measures itself
        else:
            out, nbytes = model(b), None
        loss = sum(v for k, v in out.items() if "loss" in k)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if h is not None:
            h.after_update(tr, it)
        if device.type == "cuda":
            torch.cuda.synchronize()
            nbytes = torch.cuda.max_memory_allocated(device)
        elif nbytes is None:
            nbytes = h.last_bytes
        if timed:
            st = stats[size]
            st["mem"].append(nbytes)
            st["wall"].append(time.perf_counter() - w0)
            st["cpu"].append(time.process_time() - c0)
    extra = ""
    if h is not None and h.dynamic:
        plans = {k: sorted(p.units) for k, p in h.planner.cache.items()}
        extra = "; ".join(f"{'x'.join(map(str, k))}: {len(u)} unit(s)" for k, u in plans.items())
    if h is not None:
        h.after_train(tr)
    return {s: {k: statistics.median(v) for k, v in st.items()} for s, st in stats.items()}, extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--models", default="resnet50,retinanet")
    args = ap.parse_args()
    print(tune_malloc())  # as `up train` does (runtime.tune_malloc): the allocator the trainer runs with
    device = torch.device(args.device)
    unit = "cuda max_memory_allocated" if device.type == "cuda" else "saved activation bytes"
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}; memory = {unit}")
    for kind in args.models.split(","):
        cfg = MODELS_CFG[kind]
        rows = {}
        rows["none"], _ = run(cfg, kind, "none", device, args.steps)
        rows["static"], _ = run(cfg, kind, "static", device, args.steps)
        big = max(cfg["sizes"])
        lo, hi = rows["static"][big]["mem"], rows["none"][big]["mem"]
        plans = {}
        for frac in (0.3, 0.7):
            budget = (lo + frac * (hi - lo)) / 2**30
            name = f"dynamic@{budget * 1024:.1f}MiB"
            rows[name], plans[name] = run(cfg, kind, "dynamic", device, args.steps, budget)
        print(f"\n{kind}, batch {cfg['n']}, sizes {cfg['sizes']}")
        print(f"{'mode':<22}{'size':>6}{'memory MiB':>12}{'x none':>8}{'step s':>9}{'x none':>8}{'cpu s':>8}")
        for mode, res in rows.items():
            for size, r in res.items():
                base = rows["none"][size]
                print(f"{mode:<22}{size:>6}{r['mem'] / 2**20:>12.1f}{r['mem'] / base['mem']:>8.2f}"
                      f"{r['wall']:>9.3f}{r['wall'] / base['wall']:>8.2f}{r['cpu']:>8.3f}")
            if mode in plans:
                print(f"{'':<22}plans: {plans[mode]}")


if __name__ == "__main__":
    main()
