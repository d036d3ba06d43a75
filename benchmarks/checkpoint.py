"""Time the training loop is blocked per checkpoint save, against a synchronous save.

    python benchmarks/checkpoint.py [--repeats 5] [--busy N]

For a small model (mobilenet_v3_small) and a ~100 MB one (resnet50), each with SGD momentum
state: `blocked` is the time `CheckpointStore.save` takes with async_write (a CPU copy of the
state; serialization, fsync and renames run on a background thread), `sync` the same store
writing synchronously (torch.save + fsync + os.replace + directory fsync). Runs alternate;
medians are printed. Target: blocked <= 10 % of sync, on an idle machine and on a loaded one:
``--busy N`` runs N pure-Python busy loops (one process each) for the whole measurement, e.g.
``--busy 2`` takes both cores of a 2-core machine away from it half the time.

The second table is the cost of the CRC-32s that let a load detect flipped bytes: the same
synchronous write with torch's per-record CRC-32 on (as CheckpointStore writes) and off, and on
the load side ``verify_checksums`` (reading every record back against its CRC) beside the
``torch.load`` it precedes.
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torchvision

from up_trainer.engine.allocator import tune_malloc
from up_trainer.engine.checkpoint import CheckpointStore, atomic_write_bytes, verify_checksums


def full_state(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 1, "iter": 1}


def megabytes(state):
    return sum(t.numel() * t.element_size() for t in state["model"].values()) / 1e6


def measure(state, repeats):
    blocked, sync = [], []
    with tempfile.TemporaryDirectory() as d:
        async_store = CheckpointStore(d, async_write=True)
        sync_store = CheckpointStore(d, async_write=False)
        for i in range(repeats):
            t = time.perf_counter()
            async_store.save(state, [f"ckpt_e{i}.pth"])
            blocked.append(time.perf_counter() - t)
            async_store.flush()  # not counted: the loop would be training meanwhile
            t = time.perf_counter()
            sync_store.save(state, [f"ckpt_s{i}.pth"])
            sync.append(time.perf_counter() - t)
    return statistics.median(blocked), statistics.median(sync)


def measure_checksums(state, repeats):
    """Median seconds: write with CRC-32, write without, verify, torch.load."""
    with_crc, without, verify, load = [], [], [], []
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/ckpt.pth"
        for _ in range(repeats):
            for crc, times in ((True, with_crc), (False, without)):
                torch.serialization.set_crc32_options(crc)
                t = time.perf_counter()
                atomic_write_bytes(path, lambda f: torch.save(state, f))
                times.append(time.perf_counter() - t)
            torch.serialization.set_crc32_options(True)
            atomic_write_bytes(path, lambda f: torch.save(state, f))
            t = time.perf_counter()
            assert verify_checksums(path) is None
            verify.append(time.perf_counter() - t)
            t = time.perf_counter()
            torch.load(path, map_location="cpu", weights_only=True)
            load.append(time.perf_counter() - t)
    return [statistics.median(x) for x in (with_crc, without, verify, load)]


def start_busy_loops(n):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--busy", type=int, default=0, metavar="N", help="busy-loop processes running meanwhile")
    args = ap.parse_args()
    busy = start_busy_loops(args.busy)
    try:
        run(args)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def run(args):
    if args.busy:
        print(f"{args.busy} busy-loop processes running")
    print(tune_malloc())  # as `up train` does (runtime.tune_malloc): the allocator the trainer runs with
    print(f"{'model':<22}{'weights MB':>11}{'sync ms':>10}{'blocked ms':>12}{'ratio':>8}")
    for name in ("mobilenet_v3_small", "resnet50"):
        state = full_state(getattr(torchvision.models, name)(weights=None))
        b, s = measure(state, args.repeats)
        print(f"{name:<22}{megabytes(state):>11.1f}{s * 1e3:>10.1f}{b * 1e3:>12.1f}{b / s:>8.3f}")
    print("target: blocked / sync <= 0.10")
    print(f"\n{'model':<22}{'save crc ms':>12}{'no crc ms':>10}{'cost':>7}{'verify ms':>11}{'load ms':>9}")
    for name in ("mobilenet_v3_small", "resnet50"):
        state = full_state(getattr(torchvision.models, name)(weights=None))
        crc, plain, verify, load = measure_checksums(state, args.repeats)
        print(f"{name:<22}{crc * 1e3:>12.1f}{plain * 1e3:>10.1f}{crc / plain - 1:>+7.0%}{verify * 1e3:>11.1f}"
              f"{load * 1e3:>9.1f}")


if __name__ == "__main__":
    main()
