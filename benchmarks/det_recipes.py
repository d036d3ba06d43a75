"""Every shipped small-data detection recipe (configs/det/small_data_{fcos,atss,yolox}.yaml) on
the same small-data regime, side by side: bbox AP and AP50 after each epoch against the
wall-clock minutes of training (evaluation excluded), parameters and FLOPs (``up flops`` at
the recipe's input size). Prints a reStructuredText table and the load average.

The regime (up_trainer/tasks/det/clutter_scenes.py): 300 train / 75 val cluttered scenes of
288x288 px, 4 digit classes, objects of 8-120 px that overlap, written once as COCO files
that every recipe reads.

    python benchmarks/det_recipes.py --work runs/recipes             # export, train all, table
    python benchmarks/det_recipes.py --work runs/recipes --no-train  # the table of finished runs

The recipes train at the same time (one process each, ``runtime.num_threads: 1``) so that
they share the same background load; ``--sequential`` trains one after the other. Minutes:
per epoch, from the end of the previous evaluation (the trainer's first log line for epoch 1)
to the epoch's last training iteration, summed; the harness logs every
``epoch_len / 2`` iterations so that the last iteration of every epoch is logged (for runs
logged otherwise the missing tail is extrapolated from the last logged iteration's time).
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time

RECIPES = ("fcos", "atss", "yolox")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ")


def config_path(name):
    return os.path.join(os.path.dirname(__file__), "..", "configs", "det", f"small_data_{name}.yaml")


def data_opts(data):
    ann, img = os.path.join(data, "annotations"), os.path.join(data, "images")
    return [f"dataset.train.kwargs.ann_file={ann}/instances_train.json", f"dataset.train.kwargs.img_dir={img}/train",
            f"dataset.test.kwargs.ann_file={ann}/instances_val.json", f"dataset.test.kwargs.img_dir={img}/val"]


def export_regime(data):
    if os.path.exists(os.path.join(data, "annotations", "instances_val.json")):
        return
    from up_trainer.tasks.det.clutter_scenes import export_clutter_coco

    export_clutter_coco(data)


def epoch_len(data, batch_size):
    with open(os.path.join(data, "annotations", "instances_train.json"), encoding="utf-8") as f:
        n = len({a["image_id"] for a in json.load(f)["annotations"]})  # skip_empty: true
    return -(-n // batch_size)


def train(names, data, work, epochs, sequential):
    with LoadSampler(os.path.join(work, "load.jsonl")):
        start_and_wait(names, data, work, epochs, sequential)


def start_and_wait(names, data, work, epochs, sequential):
    procs = []
    for name in names:
        run_dir = os.path.join(work, name)
        opts = data_opts(data) + [f"hooks.train_val_logger.kwargs.freq={max(1, epoch_len(data, 8) // 2)}"]
        if epochs:
            opts += [f"trainer.max_epoch={epochs}"]
        cmd = [sys.executable, "-m", "up_trainer", "train", "--config", config_path(name), "--work-dir", run_dir,
               "--opts", *opts]
        log = open(os.path.join(work, f"{name}.out"), "w", encoding="utf-8")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        if sequential:
            procs[-1].wait()
    for p in procs:
        p.wait()


class LoadSampler:
    """Appends the 1-minute load average to ``path`` every ``every`` seconds while training,
    so that the table can say under which load it was measured."""

    def __init__(self, path, every=60.0):
        self.path, self.every = path, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while True:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"time": time.time(), "load1": os.getloadavg()[0]}) + "\n")
            if self.stop.wait(self.every):
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        return False


def machine():
    """CPU model and core count."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores"


def load_summary(work):
    """'min / median / max' of the sampled 1-minute load averages, or None."""
    path = os.path.join(work, "load.jsonl")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        loads = sorted(json.loads(line)["load1"] for line in f if line.strip())
    if not loads:
        return None
    return f"{loads[0]:.1f} / {loads[len(loads) // 2]:.1f} / {loads[-1]:.1f} ({len(loads)} samples, one a minute)"


def first_log_time(run_dir):
    with open(os.path.join(run_dir, "train.log"), encoding="utf-8") as f:
        for line in f:
            m = STAMP.match(line)
            if m:
                return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
    raise ValueError(f"{run_dir}/train.log has no time stamp")


def train_minutes(run_dir, n_iter):
    """{epoch: (AP, AP50, training minutes up to its end, evaluation excluded)}."""
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    evals = {r["epoch"]: r for r in rows if r.get("phase") == "eval"}
    trains = [r for r in rows if r.get("phase") == "train"]
    out, spent, start = {}, 0.0, first_log_time(run_dir)
    for epoch in sorted(evals):
        logged = [r for r in trains if r["epoch"] == epoch]
        last = max(logged, key=lambda r: r["iter"])
        # the epoch's last iteration, extrapolated when it was not logged
        end = last["time"] + (epoch * n_iter - last["iter"]) * last.get("batch_time", 0.0)
        spent += end - start
        start = evals[epoch]["time"]
        out[epoch] = (evals[epoch]["bbox.AP"], evals[epoch]["bbox.AP50"], spent / 60.0)
    return out


def params_flops(run_dir):
    """(params, FLOPs, max_epoch) of the run's resolved config."""
    from up_trainer.config import resolve_config
    from up_trainer.flops import flops_table

    cfg = resolve_config(os.path.join(run_dir, "config.yaml"), [])
    total = flops_table(cfg).splitlines()[-1].split()
    return total[1], total[2], cfg["trainer"]["max_epoch"]


def rst(head, rows):
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(head, widths)), rule]
    return "\n".join(lines + ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows] + [rule])


def table(names, work, data):
    """Two tables: one row per recipe (size, best AP / AP50, when AP50 passed 0.5), and one row
    per epoch with each recipe's AP / AP50 and its training minutes so far."""
    n_iter = epoch_len(data, 8)
    curves, summary = {}, []
    for name in names:
        run_dir = os.path.join(work, name)
        if not os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
            continue
        curve = train_minutes(run_dir, n_iter)
        if not curve:
            continue
        curves[name] = curve
        params, flops, max_epoch = params_flops(run_dir)
        best = max(curve, key=lambda e: curve[e][0])
        passed = [e for e in sorted(curve) if curve[e][1] >= 0.5]
        summary.append((name, params, flops, f"{len(curve)} / {max_epoch}", f"{curve[best][0]:.3f} (ep {best})",
                        f"{max(c[1] for c in curve.values()):.3f}",
                        f"ep {passed[0]}, {curve[passed[0]][2]:.1f} min" if passed else "-",
                        f"{curve[max(curve)][2]:.1f}"))
    print(rst(("recipe", "params", "FLOPs", "epochs", "best AP", "best AP50", "AP50 >= 0.5 at", "minutes"), summary))
    print()
    epochs = sorted({e for c in curves.values() for e in c})
    rows = [(str(e), *(f"{c[e][0]:.3f} / {c[e][1]:.3f} ({c[e][2]:.1f})" if e in c else "-"
                       for c in curves.values())) for e in epochs]
    print(rst(("epoch", *(f"{n}: AP / AP50 (min)" for n in curves)), rows))
    print(f"machine: {machine()}")
    print("load average now: %.1f %.1f %.1f" % os.getloadavg())
    summary = load_summary(work)
    if summary:
        print(f"1-minute load average while training, min / median / max: {summary}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="runs/recipes", help="run dirs go to WORK/<recipe>")
    parser.add_argument("--data", default="data/clutter_scenes", help="the regime's COCO files (exported if missing)")
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--epochs", type=int, default=None, help="override trainer.max_epoch")
    parser.add_argument("--no-train", action="store_true", help="only read finished runs")
    parser.add_argument("--sequential", action="store_true")
    args = parser.parse_args()
    names = [n for n in args.recipes.split(",") if n]
    export_regime(args.data)
    os.makedirs(args.work, exist_ok=True)
    if not args.no_train:
        train(names, args.data, args.work, args.epochs, args.sequential)
    table(names, args.work, args.data)


if __name__ == "__main__":
    main()
