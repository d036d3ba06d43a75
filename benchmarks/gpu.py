"""GPU throughput: `up train`'s loop against a bare PyTorch loop, interleaved, over precision x
channels_last x torch.compile.

    python benchmarks/gpu.py                 # a GPU machine: the grid below, within --budget-min
    python benchmarks/gpu.py --smoke         # CPU, tiny sizes, one thread: every code path runs
    python benchmarks/gpu.py --tasks cls --dtypes bf16 --channels-last on --compile off on

Cases. ``cls``: ResNet-50, 224 px, batch 64, 25 iterations an epoch. ``det``: FCOS (``--det
retinanet`` for RetinaNet), ResNet-50 + FPN, 640 x 640 images, batch 8, 5 boxes each, 15
iterations an epoch. The data are synthetic and already on the device (one batch reused), so
both loops measure the training step and the loop around it, not the input pipeline
(benchmarks/dataloader.py measures that). SGD with momentum; runtime.cudnn_benchmark on for
both loops (fixed sizes; ``--cudnn-benchmark off`` to compare); TF32 left at torch's defaults.

The two loops run interleaved epoch by epoch in one process (benchmarks/interleave.py, as
benchmarks/overhead.py does): the bare loop is what a user writes by hand (autocast, GradScaler
for fp16, ``model.to(memory_format=channels_last)``, ``torch.compile(model)``); the up loop is
``build_trainer`` + ``trainer.train()`` with the same settings as runtime keys and its default
hooks (logger, checkpoint policy). Of 5 epochs per loop the first (cuDNN autotuning,
compilation: reported as "first epoch s") and the last (up writes its final checkpoint) are
left out; images/s and the up / bare ratio of epoch times ("t u/b") are medians over the 3
epochs between, the ratio taken per neighbouring pair. Peak memory: ``torch.cuda.max_memory_allocated`` during an epoch
above what was allocated when it began (activations, gradients, workspaces; both models'
weights and optimizer state stay resident and are left out).

Budget, measured on one H100 (2026-11-27, torch 2.11; docs/speed.rst has the figures): about
20 s per case without compile (7 cases in 2.6 min, 6 det cases in 2.0 min); a compiled case 60 s
with a cold compile cache (the loop that compiles first: 47.5 s first epoch; the other reuses the
graph) and 18 s warm. Cases run in this order: every case without compile, then compiled cls,
then compiled det; a case is not started once ``--budget-min`` (12) minutes have passed, so the
whole run stays under 14 minutes. ``python -m pytest tests/gpu -q -n 7 --dist load`` took 108 s
on the same machine. Cases left out are listed with the command that runs them.

Target: up / bare epoch time <= 1.02.
"""
import argparse
import gc
import itertools
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.data import Dataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from up_trainer.config.schema import validate  # noqa: E402
from up_trainer.engine.builder import build_trainer  # noqa: E402
from up_trainer.engine.rng import seed_everything  # noqa: E402
from up_trainer.engine.trainer import sum_losses  # noqa: E402
from up_trainer.registry import DATASETS  # noqa: E402
from up_trainer.run import setup_logging  # noqa: E402
from up_trainer.tasks.net import build_model  # noqa: E402

from interleave import train_interleaved  # noqa: E402  (benchmarks/interleave.py)

DTYPES = {"fp32": None, "fp16": "float16", "bf16": "bfloat16"}
WARMUP_EPOCHS, TIMED_EPOCHS = 1, 3  # plus one last epoch, left out (up's final checkpoint)


@DATASETS.register("bench_synthetic")
class SyntheticBatches(Dataset):
    """Benchmark only: ``iterations`` items, each the same ready batch on ``device``."""

    def __init__(self, task: str = "cls", batch_size: int = 64, image_size: int = 224, iterations: int = 25,
                 num_classes: int = 1000, device: str = "cuda", channels_last: bool = False):
        self.iterations = iterations
        gen = torch.Generator().manual_seed(0)
        size = (batch_size, 3, image_size, image_size)
        if task == "cls":
            image = torch.randn(size, generator=gen)
            if channels_last:
                image = image.contiguous(memory_format=torch.channels_last)
            self.batch = {"image": image.to(device), "label": torch.randint(num_classes, (batch_size,), generator=gen).to(device)}
        else:
            xy = torch.rand(batch_size, 5, 2, generator=gen) * image_size / 2
            wh = (torch.rand(batch_size, 5, 2, generator=gen) * 0.4 + 0.06) * image_size
            boxes = torch.cat([xy, (xy + wh).clamp(max=image_size - 1)], dim=2)
            labels = torch.randint(1, num_classes, (batch_size, 5), generator=gen)
            self.batch = {"image": [im.to(device) for im in torch.rand(size, generator=gen)],
                          "target": [{"boxes": b.to(device), "labels": lab.to(device)} for b, lab in zip(boxes, labels)]}

    def __len__(self):
        return self.iterations

    def __getitem__(self, index):
        return self.batch

    @staticmethod
    def collate_fn(items):
        return items[0]  # batch_size 1: each item is a whole batch


def case_sizes(task, smoke, det):
    """(net config, dataset kwargs) of one task at full or smoke size."""
    if task == "cls":
        net = {"type": "resnet50", "kwargs": {"num_classes": 1000}}
        data = {"batch_size": 64, "image_size": 224, "iterations": 25, "num_classes": 1000}
        if smoke:
            data = {"batch_size": 2, "image_size": 32, "iterations": 2, "num_classes": 1000}
        return net, data
    size = 64 if smoke else 640
    net = {"type": det, "kwargs": {"num_classes": 80, "backbone": "mobilenet_v3_large" if smoke else "resnet50",
                                   "min_size": size, "max_size": size}}
    data = {"batch_size": 2 if smoke else 8, "image_size": size, "iterations": 2 if smoke else 15, "num_classes": 80}
    return net, data


def up_config(task, dtype, channels_last, compiled, device, args):
    net, data = case_sizes(task, args.smoke, args.det)
    epochs = WARMUP_EPOCHS + TIMED_EPOCHS + 1
    amp = {"enable": DTYPES[dtype] is not None, "dtype": DTYPES[dtype] or "float16", "force": True}
    return validate({
        "runtime": {"seed": 0, "device": device.type, "amp": amp, "channels_last": channels_last, "compile": compiled,
                    "num_threads": 1 if args.smoke else None,
                    "cudnn_benchmark": device.type == "cuda" and args.cudnn_benchmark == "on"},
        "dataset": {"train": {"type": "bench_synthetic", "kwargs": {"task": task, "device": str(device),
                                                                     "channels_last": channels_last, **data}},
                    "batch_size": 1},
        "trainer": {"max_epoch": epochs, "save_freq": 10 ** 6,
                    "optimizer": {"type": "SGD", "kwargs": {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4}}},
        "net": net,
    }), data


def bare_epochs(cfg, batch, amp_dtype, device, epochs):
    """The loop a user writes by hand, as a generator: set-up, then one epoch per next()."""
    rt = cfg["runtime"]
    seed_everything(rt["seed"])
    model = build_model(cfg["net"]).to(device)
    if rt["channels_last"]:
        model = model.to(memory_format=torch.channels_last)
    forward = torch.compile(model) if rt["compile"] else model
    optimizer = torch.optim.SGD(model.parameters(), **cfg["trainer"]["optimizer"]["kwargs"])
    scaler = torch.amp.GradScaler(device.type) if amp_dtype is torch.float16 else None
    iterations = cfg["dataset"]["train"]["kwargs"]["iterations"]
    yield
    for _ in range(epochs):
        model.train()
        for _ in range(iterations):
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = sum_losses(forward(batch))
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        yield


def epoch_clock(device):
    """start / finish callables for train_interleaved: (wall s, peak bytes above the start)."""
    cuda = device.type == "cuda"

    def start(loop):
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        return time.perf_counter(), torch.cuda.memory_allocated(device) if cuda else 0

    def finish(loop, started):
        if cuda:
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - started[0]
        return wall, (torch.cuda.max_memory_allocated(device) - started[1]) if cuda else None
    return start, finish


def run_case(task, dtype, channels_last, compiled, device, args, bare_first):
    cfg, data = up_config(task, dtype, channels_last, compiled, device, args)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = build_trainer(cfg, work_dir=run_dir)
        amp_dtype = trainer.optim.amp_dtype  # what up decided runs (the bare loop runs the same)
        bare = bare_epochs(cfg, trainer.loaders.train_set.batch, amp_dtype, device, cfg["trainer"]["max_epoch"])
        next(bare)
        start, finish = epoch_clock(device)
        epochs = train_interleaved(trainer, bare, bare_first, start, finish)
    del trainer, bare
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if compiled:
        torch._dynamo.reset()  # the next case compiles afresh (and stays under the recompile limit)
    images = data["batch_size"] * data["iterations"]
    timed = slice(WARMUP_EPOCHS, WARMUP_EPOCHS + TIMED_EPOCHS)
    out = {"task": task, "dtype": dtype, "runs": str(amp_dtype or "float32").replace("torch.", ""),
           "channels_last": channels_last, "compile": compiled}
    for loop in ("bare", "up"):
        walls = [e[0] for e in epochs[loop][timed]]
        peaks = [e[1] for e in epochs[loop][timed] if e[1] is not None]
        out[loop] = {"images_s": images / statistics.median(walls), "first_epoch_s": epochs[loop][0][0],
                     "peak_mib": max(peaks) / 2 ** 20 if peaks else None}
    out["ratio"] = statistics.median(u[0] / b[0] for u, b in zip(epochs["up"][timed], epochs["bare"][timed]))
    return out


def print_row(r):
    def mib(v):
        return f"{v:>8.0f}" if v is not None else f"{'--':>8}"
    print(f"{r['task']:<5}{r['dtype']:>5}{r['runs']:>9}{'on' if r['channels_last'] else 'off':>4}"
          f"{'on' if r['compile'] else 'off':>5}{r['bare']['images_s']:>10.1f}{r['up']['images_s']:>10.1f}"
          f"{r['ratio']:>8.3f} {mib(r['bare']['peak_mib'])}{mib(r['up']['peak_mib'])}"
          f"{r['bare']['first_epoch_s']:>8.1f}{r['up']['first_epoch_s']:>8.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks the code paths, measures nothing")
    ap.add_argument("--tasks", nargs="+", default=["cls", "det"], choices=["cls", "det"])
    ap.add_argument("--det", default="fcos", choices=["fcos", "retinanet"])
    ap.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    ap.add_argument("--channels-last", nargs="+", default=["off", "on"], choices=["off", "on"])
    ap.add_argument("--compile", nargs="+", default=None, choices=["off", "on"],
                    help="default: off and on (off only with --smoke: compiling on a CPU takes minutes)")
    ap.add_argument("--cudnn-benchmark", default="on", choices=["off", "on"])
    ap.add_argument("--budget-min", type=float, default=12.0, help="start no case after this many minutes")
    ap.add_argument("--out", help="also write the results as JSON here")
    args = ap.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py: no CUDA device (torch.cuda.is_available() is false); --smoke runs it on the CPU")
    device = torch.device("cpu") if args.smoke else torch.device("cuda", 0)
    compiles = args.compile or (["off"] if args.smoke else ["off", "on"])
    if args.smoke:  # on a shared CPU a second intra-op thread mostly spins (20x slower steps measured)
        torch.set_num_threads(1)
    setup_logging(None, is_main=False)  # the trainer's log lines are written, not shown
    cases = [(task, dtype, cl == "on", comp == "on") for comp, task, dtype, cl in
             itertools.product(compiles, args.tasks, args.dtypes, args.channels_last)]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (smoke sizes)"
    print(f"{name}, torch {torch.__version__}, {len(cases)} cases, budget {args.budget_min} min")
    print(f"{'task':<5}{'dtype':>5}{'runs':>9}{'cl':>4}{'comp':>5}{'bare im/s':>10}{'up im/s':>10}{'t u/b':>8}"
          f"{'bare MiB':>9}{'up MiB':>8}{'1st b s':>8}{'1st u s':>8}")
    began, results, skipped = time.perf_counter(), [], []
    for i, case in enumerate(cases):
        if time.perf_counter() - began > args.budget_min * 60:
            skipped.append(case)
            continue
        results.append(run_case(*case, device, args, bare_first=i % 2 == 0))
        print_row(results[-1])
    print(f"total {(time.perf_counter() - began) / 60:.1f} min; target up / bare <= 1.02: "
          f"{sum(r['ratio'] <= 1.02 for r in results)} of {len(results)} cases met")
    for task, dtype, cl, comp in skipped:
        print(f"not run (over the budget): python benchmarks/gpu.py --tasks {task} --dtypes {dtype} "
              f"--channels-last {'on' if cl else 'off'} --compile {'on' if comp else 'off'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
