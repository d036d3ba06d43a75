"""End to end (``benchmarks/dataloader.py --e2e``): images/s of the digits detection demo's
second training epoch (configs/det/digits_fcos.yaml: FCOS, MobileNetV3, 64x64 scenes, batch 16).

Variants, each 2 epochs of ``up train`` in its own process:

- ``generated``: the demo as shipped (``digits_det`` renders every scene in the loader);
- ``files``: the same number of scenes read from PNG files (``up data digits-det``'s COCO
  export, through the ``coco`` dataset), ``dataset.cache: none``;
- ``files+ram``: the same with ``dataset.cache: ram`` (epoch 2 decodes nothing);

at each ``--e2e-workers`` count, ``--rounds`` times (medians). With ``--before TREE`` (an older checkout of the project, e.g.
``git archive <commit> | tar -x -C TREE``) the variants that tree supports run on it too, as
``before``. The runs of one variant alternate between the trees, their order swapping every
round and variant. A hook (loaded through
``runtime.imports``) times each epoch from its start to its last optimizer update (evaluation
and checkpoints excluded) and counts the images it trained on.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TIMER = '''
import json, time
from up_trainer.hooks.base import Hook
from up_trainer.registry import HOOKS


@HOOKS.register("bench_epoch_speed")
class EpochSpeed(Hook):
    priority = "LOWEST"

    def __init__(self, out: str = ""):
        super().__init__()
        self.out = out

    def before_epoch(self, trainer, epoch):
        self.started, self.images, self.last = time.perf_counter(), 0, None

    def before_forward(self, trainer, iteration, batch):
        self.images += len(batch["image"])

    def after_update(self, trainer, iteration):
        self.last = time.perf_counter()

    def after_epoch(self, trainer, epoch):
        with open(self.out, "a") as f:
            f.write(json.dumps({"epoch": epoch, "images": self.images, "seconds": self.last - self.started}) + "\\n")
'''


def demo_cfg(train_entry, workers, cache, out):
    with open(os.path.join(REPO, "configs", "det", "digits_fcos.yaml"), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg["runtime"]["imports"] = ["bench_epoch_speed"]
    cfg["dataset"]["train"] = train_entry
    cfg["dataset"]["num_workers"] = workers
    if cache is not None:
        cfg["dataset"]["cache"] = cache
    cfg["trainer"]["max_epoch"] = 2
    cfg["trainer"]["is_eval"] = False  # the figure is training speed
    cfg["hooks"] = [{"type": "bench_epoch_speed", "kwargs": {"out": out}}]
    return cfg


def run_variant(tree, cfg, work):
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "cfg.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, os.path.dirname(cfg["hooks"][0]["kwargs"]["out"])]))
    res = subprocess.run([sys.executable, "-m", "up_trainer", "train", "--config", path, "--work-dir", work],
                         env=env, capture_output=True, text=True, cwd=work)
    if res.returncode:
        raise SystemExit(f"{tree}: up train failed:\n{res.stderr[-2000:]}")
    with open(cfg["hooks"][0]["kwargs"]["out"]) as f:
        rows = [json.loads(line) for line in f]
    second = [r for r in rows if r["epoch"] == 2][-1]
    return second["images"] / second["seconds"]


def run_e2e(num_images, worker_counts, before=None, rounds=1):
    from up_trainer.tasks.det.export import export_digits_coco

    trees = [("after", REPO)] + ([("before", os.path.abspath(before))] if before else [])
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "bench_epoch_speed.py"), "w") as f:
            f.write(TIMER)
        ann_file, img_dir = export_digits_coco(os.path.join(tmp, "data"), num_images, 1, seed=0)["train"]
        generated = {"type": "digits_det", "kwargs": {"split": "train", "num_images": num_images, "canvas_size": 64,
                                                      "digits_per_image": [1, 4], "scale_range": [12, 24],
                                                      "noise": 0.05, "seed": 0}}
        files = {"type": "coco", "kwargs": {"ann_file": ann_file, "img_dir": img_dir}}
        variants = [("generated", generated, None), ("files", files, None), ("files+ram", files, "ram")]
        print(f"digits FCOS demo, {num_images} training scenes, batch 16, epoch 2 images/s (median of {rounds}); "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"{'tree':<8}{'workers':>8}" + "".join(f"{name:>12}" for name, _, _ in variants))
        for workers in worker_counts:
            figures = {name: {} for name, _ in trees}
            for r in range(rounds):
                for k, (name, entry, cache) in enumerate(variants):
                    for tree_name, tree in (trees if (k + r) % 2 == 0 else trees[::-1]):
                        if cache is not None and tree_name == "before":
                            continue  # no dataset.cache there
                        tag = f"{tree_name}-{name}-{workers}-{r}"
                        cfg = demo_cfg(entry, workers, cache, os.path.join(tmp, f"{tag}.jsonl"))
                        figures[tree_name].setdefault(name, []).append(run_variant(tree, cfg, os.path.join(tmp, tag)))
            figures = {t: {n: statistics.median(v) for n, v in f.items()} for t, f in figures.items()}
            for tree_name, _ in trees:
                print(f"{tree_name:<8}{workers:>8}" + "".join(
                    f"{figures[tree_name][n]:>12.1f}" if n in figures[tree_name] else f"{'-':>12}"
                    for n, _, _ in variants), flush=True)
        print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
