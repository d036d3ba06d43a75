"""``torch.compile`` against eager for a small detector on CPU: per-image time once compiled, the
compile time of the first call and of each new batch size, and the graph breaks behind them (the
``compile`` row of ``up benchmark``, docs/export.rst).

    python benchmarks/export_compile.py [--repeats 10] [--warmup 3]

The net is the seeded ATSS RetinaNet of tests/export/test_deploy_families.py (resnet18, 32 FPN
channels) on 64 px digit scenes, one thread. Eager and compiled run the same batch of one scene:
``--warmup`` untimed calls, then ``--rounds`` rounds of ``--repeats`` timed calls each, eager and compiled
alternating round by round so that load from other processes hits both alike; the medians and
their ratio (compile / eager) are printed with the machine and the load average.
"""
import argparse
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time
import warnings

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def times_ms(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return times


def seconds(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    sys.path[:0] = [os.path.join(REPO, "tests", "export"), os.path.join(REPO, "tests")]
    import test_deploy_families as nets
    from torch._dynamo.utils import counters

    torch.set_num_threads(1)
    _, _, model = nets.make_detector(pathlib.Path(tempfile.mkdtemp()), "atss")
    images = nets.scenes(8)
    one = {"image": images[:1]}
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}; torch {torch.__version__}; 1 thread")
    with torch.no_grad():
        compiled = torch.compile(model)
        first = seconds(lambda: compiled(one))
        for _ in range(args.warmup):
            model(one), compiled(one)
        runs = {"eager": [], "compiled": []}
        for _ in range(args.rounds):
            runs["eager"] += times_ms(lambda: model(one), args.repeats)
            runs["compiled"] += times_ms(lambda: compiled(one), args.repeats)
        eager, fast = statistics.median(runs["eager"]), statistics.median(runs["compiled"])
        batch8 = seconds(lambda: compiled({"image": images}))
        batch3 = seconds(lambda: compiled({"image": images[2:5]}))
        same_shape = seconds(lambda: compiled({"image": images[3:4]}))
    print(f"eager {eager:.2f} ms/img, compiled {fast:.2f} ms/img at batch 1 (ratio {fast / eager:.2f})")
    print(f"compile: first call {first:.1f} s; first batch of 8 {batch8:.1f} s; first batch of 3 {batch3:.1f} s; "
          f"another image at batch 1 {same_shape:.2f} s")
    breaks = counters["graph_break"]
    def why(reason):
        lines = [line.strip() for line in reason.splitlines() if line.strip()]
        return next((line for line in lines if line.startswith("Explanation")), lines[0])

    print(f"graphs {counters['stats']['unique_graphs']}; graph breaks {sum(breaks.values())}: "
          + "; ".join(f"{n} x {why(reason)}" for reason, n in breaks.items()))
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
