"""Steady-state images/s of the yolox input pipeline in several checkouts of the project: the
loader as a training run of more than one epoch has it (persistent workers), worker start-up
excluded; the first pass (start-up included) printed beside it.

    python benchmarks/dataloader_steady.py --tree float=/tmp/float23 --tree new=. \\
        [--workers 0 1 2] [--rounds 3] [--images 64] [--passes 3] [--normalize-on device]

Why a second harness: benchmarks/dataloader_trees.py times one pass of a fresh DataLoader per
measurement, worker start-up included (as an epoch without persistent workers has it). Start-up
costs every tree about the same absolute time, so on a 64-image pass it compresses the trees'
ratio. With workers and more than one epoch a run keeps its workers (``persistent_workers``,
up_trainer/data/loader.py), so it pays the start-up once per run, not per epoch.

One measurement is one subprocess with ``PYTHONPATH=<tree>``: that tree's ``up_trainer`` and the
yolox pipeline of its own benchmarks/dataloader.py (UP's yolox_small training transforms),
built with its ``build_dataset``, served by its ``LoaderFactory`` (per-batch seeding, resumable
sampler, the dataset's own collate, DataLoader's default prefetch) with batch 8, seed 0 and
``persistent_workers`` when workers > 0. Pass 1 (epoch 1) is timed from the start of iteration
(worker start-up included) and is the warm-up; passes 2 .. 1 + ``--passes`` (epochs 2, ...) are
timed together: ``steady`` = their images / their seconds. Every batch goes through what the
tree's trainer does before the model sees it: the new tree's ``batch_to_model`` (uint8 to float
and normalization in the main process under ``normalize_on: device``, standing in for the
accelerator, as benchmarks/dataloader.py has it), the old tree's ``to_device`` (its samples are
float already, converted in the workers). The device is the CPU, so neither copies.

The data are the JPEGs benchmarks/dataloader.py writes (same generator, same seed): 640x480
images with 3-8 boxes each, written once and read by every tree. Within each round and worker
count the trees run in turn, their order rotating every round; medians over ``--rounds``. One
intra-op thread in the main process (and in every worker, as torch sets there).
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


# -- one measurement, in a subprocess running one tree's code ----------------------------------------
def tree_module(tree):
    """The tree's own benchmarks/dataloader.py (its YOLOX_TRANSFORMS), under a name that cannot
    collide with this folder's copy."""
    spec = importlib.util.spec_from_file_location("tree_dataloader", os.path.join(tree, "benchmarks", "dataloader.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure_child(tree, ann_file, img_dir, workers, passes, normalize):
    """{first, steady, passes, images, up_trainer}: images/s of one persistent loader of ``tree``."""
    import logging

    import torch

    torch.set_num_threads(1)
    logging.getLogger("up").setLevel(logging.WARNING)
    import up_trainer
    from up_trainer.data.loader import LoaderFactory
    from up_trainer.engine.builder import build_dataset

    if not os.path.abspath(up_trainer.__file__).startswith(os.path.abspath(tree) + os.sep):
        raise RuntimeError(f"up_trainer from {up_trainer.__file__}, not from {tree}")
    context = ()  # build_dataset's context argument, in a tree that has one
    try:  # the uint8 tree: the conversion to the model's float input, where normalize_on puts it
        from up_trainer.data.model_input import batch_to_model
        try:  # the run's DataContext carries it to the data set
            from up_trainer.data.context import DataContext

            context = (DataContext(normalize_on=normalize),)
        except ImportError:  # an older tree: a process-wide setting
            from up_trainer.data.model_input import set_normalize_on

            set_normalize_on(normalize)

        def to_model(batch):
            return batch_to_model(batch, torch.device("cpu"), None)
    except ImportError:  # the float tree: samples leave their workers converted
        from up_trainer.data.loader import to_device

        def to_model(batch):
            return to_device(batch, torch.device("cpu"), non_blocking=True, memory_format=None)

    bench = tree_module(tree)
    data = build_dataset({"type": "coco", "kwargs": {"ann_file": ann_file, "img_dir": img_dir,
                                                      "transforms": bench.YOLOX_TRANSFORMS}}, "yolox", *context)
    cfg = {"batch_size": 8, "test_batch_size": None, "num_workers": workers, "pin_memory": False,
           "persistent_workers": workers > 0, "prefetch_factor": None, "drop_last": False}
    factory = LoaderFactory(cfg, data, None, seed=0)
    factory.epochs = passes + 1  # the new tree reads it; an explicit persistent_workers decides anyway

    def one_pass(epoch):
        loader = factory.train_loader(epoch)
        start = time.perf_counter()
        n = 0
        for batch in loader:
            batch = to_model(batch)
            image = batch["image"]
            if not (image.is_floating_point() if torch.is_tensor(image) else image[0].is_floating_point()):
                raise RuntimeError("the batch reached the model unconverted")
            n += len(image)
        return n, time.perf_counter() - start

    n1, t1 = one_pass(1)
    steady = [one_pass(epoch) for epoch in range(2, passes + 2)]
    return {"first": n1 / t1, "steady": sum(n for n, _ in steady) / sum(t for _, t in steady),
            "passes": [n / t for n, t in steady], "images": n1, "up_trainer": os.path.dirname(up_trainer.__file__)}


def run_child(tree, paths, workers, passes, normalize):
    env = dict(os.environ, PYTHONPATH=tree)
    command = [sys.executable, os.path.abspath(__file__), "--child", tree, "--ann-file", paths[0],
               "--img-dir", paths[1], "--workers", str(workers), "--passes", str(passes), "--normalize-on", normalize]
    out = subprocess.run(command, capture_output=True, text=True, cwd=tree, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{tree}, {workers} workers:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the harness ------------------------------------------------------------------------------------
def write_data(tmp, det_images):
    """benchmarks/dataloader.py's det data: the same generator draws its cls images first."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    from dataloader import write_cls, write_det

    rng = np.random.default_rng(0)
    write_cls(os.path.join(tmp, "cls"), 256, rng)
    return write_det(os.path.join(tmp, "det"), det_images, rng)


def summary(results, trees, worker_counts):
    """Medians per tree; ``x``: ratio of the medians to the first tree's; ``paired x``: median
    over the rounds of each round's ratio (the two measurements of a round ran within a minute,
    so the machine's drift cancels there)."""
    ref = trees[0][0]
    head = ["workers", "tree", "first", "steady", "first x", "steady x", "paired x"]
    print("\nimages/s, medians over the rounds; x: against " + ref + " (first / steady; paired: steady)")
    print("".join(f"{h:>10}" for h in head))
    for workers in worker_counts:
        rounds = results[(ref, workers)]
        base = {k: statistics.median(m[k] for m in rounds) for k in ("first", "steady")}
        for name, _ in trees:
            mine = results[(name, workers)]
            med = {k: statistics.median(m[k] for m in mine) for k in ("first", "steady")}
            paired = statistics.median(a["steady"] / b["steady"] for a, b in zip(mine, rounds))
            row = [workers, name, f"{med['first']:.1f}", f"{med['steady']:.1f}",
                   f"{med['first'] / base['first']:.2f}", f"{med['steady'] / base['steady']:.2f}", f"{paired:.2f}"]
            print("".join(f"{c:>10}" for c in row), flush=True)


def load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", help="NAME=PATH of a checkout (repeatable; the first is the "
                    "reference of the ratios)")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--images", type=int, default=64, help="images per pass (the det data set's size)")
    ap.add_argument("--passes", type=int, default=3, help="timed passes after the warm-up pass")
    ap.add_argument("--normalize-on", default="device", choices=["device", "workers"],
                    help="the uint8 tree's dataset.normalize_on (device: converted in the main process)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--ann-file", help=argparse.SUPPRESS)
    ap.add_argument("--img-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        result = measure_child(args.child, args.ann_file, args.img_dir, args.workers[0], args.passes,
                               args.normalize_on)
        return print(json.dumps(result))
    if not args.tree:
        ap.error("give at least one --tree NAME=PATH")
    trees = [(name, os.path.abspath(path)) for name, path in (t.split("=", 1) for t in args.tree)]
    print(f"{len(trees)} trees, {args.rounds} rounds, {args.images} images per pass, 1 warm-up + {args.passes} "
          f"timed passes, normalize_on {args.normalize_on}; {os.cpu_count()} CPUs; load average {load()} "
          f"at {time.strftime('%H:%M:%S', time.gmtime())} UTC", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_data(tmp, args.images)
        for workers in args.workers:
            for r in range(args.rounds):
                for i in range(len(trees)):
                    name, path = trees[(i + r) % len(trees)]
                    m = run_child(path, paths, workers, args.passes, args.normalize_on)
                    results.setdefault((name, workers), []).append(m)
                    print(f"  workers {workers} round {r + 1} {name}: first {m['first']:.1f}, steady "
                          f"{m['steady']:.1f} ({' '.join(f'{v:.1f}' for v in m['passes'])}) images/s "
                          f"[load {os.getloadavg()[0]:.1f}]", flush=True)
    summary(results, trees, args.workers)
    print(f"load average after: {load()} at {time.strftime('%H:%M:%S', time.gmtime())} UTC")


if __name__ == "__main__":
    main()
