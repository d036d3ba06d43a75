"""Time the training loop is blocked per checkpoint save, against a synchronous save.

    python benchmarks/checkpoint.py [--repeats 5]

For a small model (mobilenet_v3_small) and a ~100 MB one (resnet50), each with SGD momentum
state: `blocked` is the time `CheckpointStore.save` takes with async_write (a CPU copy of the
state; serialization, fsync and renames run on a background thread), `sync` the same store
writing synchronously (torch.save + fsync + os.replace + directory fsync). Runs alternate;
medians are printed. Target: blocked <= 10 % of sync.
"""
import argparse
import statistics
import tempfile
import time

import torch
import torchvision

from up_trainer.engine.allocator import tune_malloc
from up_trainer.engine.checkpoint import CheckpointStore


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(tune_malloc())  # as `up train` does (runtime.tune_malloc): the allocator the trainer runs with
    print(f"{'model':<22}{'weights MB':>11}{'sync ms':>10}{'blocked ms':>12}{'ratio':>8}")
    for name in ("mobilenet_v3_small", "resnet50"):
        state = full_state(getattr(torchvision.models, name)(weights=None))
        b, s = measure(state, args.repeats)
        print(f"{name:<22}{megabytes(state):>11.1f}{s * 1e3:>10.1f}{b * 1e3:>12.1f}{b / s:>8.3f}")
    print("target: blocked / sync <= 0.10")


if __name__ == "__main__":
    main()
