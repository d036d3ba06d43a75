"""COCO-sized data on one box: the data index against pycocotools, loader workers' private
memory, and COCO evaluation at 5,000 images.

    python benchmarks/scale.py --work /tmp/scale                  # everything (about 12 min on 2 cores)
    python benchmarks/scale.py --work /tmp/scale --only index,eval

``--work`` receives a generated, seeded instances file the size of COCO train2017 (118,287
images, about 7.5 boxes each, 80 categories; ``--images`` to change) whose image files are
links to eight small generated PNGs, so only the index is large. Each measurement runs in a
fresh subprocess (peak memory is that process's own) and prints one line:

- index: seconds and resident memory held (RSS after minus before) to build the ``coco`` data set of the file, against
  pycocotools' ``COCO()`` of the same file in the same run, and their ratios;
- workers: private memory (Private_Clean + Private_Dirty from /proc/PID/smaps_rollup) of each
  DataLoader worker at the end of one whole pass over the data set, at 2 and 4 workers, and
  how much of it grew over the pass (after its first batch to the end: the index's share);
- eval: seconds of the bbox evaluation of 5,000 images x 100 detections through the
  project's evaluation (faster-coco-eval when installed) against pycocotools' COCOeval;
- startup: ``up train --dry-run`` of configs/det/small_data_fcos.yaml (everything built, two
  training iterations, two evaluation batches) with the whole file as train set and its first
  5,000 images as val set, against the same run with a 200-image file as both; seconds and peak
  memory of each and the difference, against pycocotools' ``COCO()`` of the same two files.
  ``--profile FILE`` also writes a cProfile of the large run's process to FILE;
- gather: two gloo processes each holding half of 5,000 evaluation records of 100 detections
  gather them on rank 0 in one round and in rounds of 1,024 records: seconds and rank 0's peak
  memory growth over the gather.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_IMAGES = 118_287
N_CLASSES = 80
EVAL_IMAGES = 5_000
STARTUP_SMALL = 200  # the small run of the start-up measure: the file's first 200 images


def generate(work, n_images, seed=0):
    """The instances file (and its image links) under ``work``; kept between runs."""
    ann = os.path.join(work, f"instances_{n_images}.json")
    img_dir = os.path.join(work, "images")
    if os.path.exists(ann):
        return ann, img_dir
    import numpy as np
    from PIL import Image

    rng = random.Random(seed)
    os.makedirs(os.path.join(work, "pool"), exist_ok=True)
    os.makedirs(img_dir, exist_ok=True)
    pool = []
    for i in range(8):
        path = os.path.join(work, "pool", f"{i}.png")
        pixels = np.random.default_rng(i).integers(0, 255, (64, 80, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path)
        pool.append(path)
    images, annotations = [], []
    for i in range(1, n_images + 1):
        name = f"{i:012d}.png"
        link = os.path.join(img_dir, name)
        if not os.path.lexists(link):
            os.symlink(pool[i % len(pool)], link)
        images.append({"id": i, "file_name": name, "width": 80, "height": 64})
        for _ in range(rng.randint(1, 14)):
            w, h = rng.uniform(2, 40), rng.uniform(2, 30)
            x, y = rng.uniform(0, 80 - w), rng.uniform(0, 64 - h)
            annotations.append({"id": len(annotations) + 1, "image_id": i, "category_id": rng.randint(1, N_CLASSES),
                                "bbox": [round(x, 2), round(y, 2), round(w, 2), round(h, 2)],
                                "area": round(w * h, 2), "iscrowd": 0})
    categories = [{"id": c, "name": f"class{c}", "supercategory": "thing"} for c in range(1, N_CLASSES + 1)]
    with open(ann, "w", encoding="utf-8") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return ann, img_dir


def subset(ann, n_images, path):
    """The first ``n_images`` images of ``ann`` with their annotations, written to ``path`` once."""
    if not os.path.exists(path):
        with open(ann, encoding="utf-8") as f:
            data = json.load(f)
        images = data["images"][:n_images]
        keep = {img["id"] for img in images}
        data.update(images=images, annotations=[a for a in data["annotations"] if a["image_id"] in keep])
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f)
    return path


def rss_mb():
    with open("/proc/self/status", encoding="utf-8") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


# -- measurements, each in its own process --------------------------------------------------------
def index_pycocotools(ann, img_dir):
    from pycocotools.coco import COCO

    base, t = rss_mb(), time.perf_counter()
    coco = COCO(ann)
    return {"seconds": time.perf_counter() - t, "held_mb": rss_mb() - base, "images": len(coco.imgs)}


def index_ours(ann, img_dir):
    import up_trainer.tasks.det  # noqa: F401  (registers the data sets)
    from up_trainer.engine.builder import build_dataset

    base, t = rss_mb(), time.perf_counter()
    ds = build_dataset({"type": "coco", "kwargs": {"ann_file": ann, "img_dir": img_dir}}, "dataset.train")
    return {"seconds": time.perf_counter() - t, "held_mb": rss_mb() - base, "images": len(ds)}


def worker_memory(ann, img_dir, workers):
    """Private MB of each worker after a whole pass (measured before the last batch is taken),
    through the loaders a run builds (the ATSS small-data recipe's dataset section on this file)."""
    from up_trainer.config import resolve_config
    from up_trainer.data.loader import LoaderFactory
    from up_trainer.engine.builder import build_dataset

    recipe = os.path.join(os.path.dirname(__file__), "..", "configs", "det", "small_data_atss.yaml")
    cfg = resolve_config(recipe, [f"dataset.train.kwargs.ann_file={ann}", f"dataset.train.kwargs.img_dir={img_dir}",
                                  "dataset.train.kwargs.transforms=[]", f"dataset.num_workers={workers}",
                                  "dataset.batch_size=64"])
    ds = build_dataset(cfg["dataset"]["train"], "dataset.train")
    loader = LoaderFactory(cfg["dataset"], ds, None, seed=0).train_loader(1)
    it = iter(loader)
    t = time.perf_counter()
    next(it)
    workers_of = getattr(it, "_workers", None) or getattr(getattr(it, "_iterator", None), "_workers", [])
    first = [private_mb(w.pid) for w in workers_of]  # what a worker holds before it touched the index
    for _ in range(len(loader) - 2):
        next(it)
    private = [private_mb(w.pid) for w in workers_of]
    next(it)
    return {"workers": workers, "private_mb": [round(p, 1) for p in private],
            "growth_mb": [round(p - f, 1) for p, f in zip(private, first)], "pass_seconds": time.perf_counter() - t}


def private_mb(pid):
    with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return sum(int(fields[k].split()[0]) for k in ("Private_Clean", "Private_Dirty")) / 1024


def eval_time(ann, img_dir, backend):
    from up_trainer.tasks.det.coco_backend import resolve_backend, run_bbox_eval

    with open(ann, encoding="utf-8") as f:
        data = json.load(f)
    keep = {img["id"] for img in data["images"][:EVAL_IMAGES]}
    gt = {"images": [i for i in data["images"] if i["id"] in keep],
          "annotations": [a for a in data["annotations"] if a["image_id"] in keep],
          "categories": data["categories"]}
    rng = random.Random(1)
    dets = []
    for image_id in sorted(keep):
        for _ in range(100):
            w, h = rng.uniform(2, 40), rng.uniform(2, 30)
            dets.append({"image_id": image_id, "category_id": rng.randint(1, N_CLASSES), "score": rng.random(),
                         "bbox": [rng.uniform(0, 80 - w), rng.uniform(0, 64 - h), w, h]})
    t = time.perf_counter()
    ev, _ = run_bbox_eval(gt, dets, backend=resolve_backend(backend))
    return {"backend": backend, "seconds": time.perf_counter() - t, "detections": len(dets),
            "AP": round(float(ev.stats[0]), 4)}


def startup(train_ann, val_ann, img_dir, profile=None):
    """Wall seconds and peak resident MB of ``up train --dry-run`` on these files (a child process
    of this one, so the peak is the run's own)."""
    import resource
    import shutil
    import tempfile

    repo = REPO
    recipe = os.path.join(repo, "configs", "det", "small_data_fcos.yaml")
    work = tempfile.mkdtemp(prefix="up_startup_")
    args = ["train", "--config", recipe, "--work-dir", work, "--dry-run", "--opts",
            f"dataset.train.kwargs.ann_file={train_ann}", f"dataset.train.kwargs.img_dir={img_dir}",
            f"dataset.test.kwargs.ann_file={val_ann}", f"dataset.test.kwargs.img_dir={img_dir}",
            f"net.kwargs.num_classes={N_CLASSES}"]
    profiler = ["-m", "cProfile", "-o", profile] if profile else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    t = time.perf_counter()
    run = subprocess.run([sys.executable, *profiler, "-m", "up_trainer", *args], capture_output=True, text=True,
                         env=env, cwd=repo)
    seconds = time.perf_counter() - t
    shutil.rmtree(work, ignore_errors=True)
    if run.returncode:
        sys.exit(f"startup: up train --dry-run failed:\n{run.stderr[-3000:]}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def coco_load_pair(train_ann, val_ann):
    from pycocotools.coco import COCO

    base, t, cpu = rss_mb(), time.perf_counter(), time.process_time()
    both = COCO(train_ann), COCO(val_ann)
    seconds, cpu_seconds, held = time.perf_counter() - t, time.process_time() - cpu, rss_mb() - base
    assert both  # held until measured
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "held_mb": held}


def _gather_rank(rank, world, chunk, init_file, out):
    import resource

    import torch.distributed as torch_dist

    from up_trainer.engine.distributed import DistInfo

    torch_dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    rng = random.Random(rank)
    records = []
    for index in range(rank, EVAL_IMAGES, world):  # as CocoEvaluator.results() gives them
        boxes = [[rng.uniform(0, 40), rng.uniform(0, 30), rng.uniform(40, 80), rng.uniform(30, 64)]
                 for _ in range(100)]
        records.append({"index": index, "image_id": index + 1, "height": 64, "width": 80,
                        "gt_boxes": boxes[:7], "gt_labels": [1] * 7, "ignore_boxes": [], "boxes": boxes,
                        "scores": [rng.random() for _ in boxes], "labels": [rng.randint(1, N_CLASSES) for _ in boxes],
                        "_classes": None, "_cat_ids": None})
    torch_dist.barrier()
    base, t = rss_mb(), time.perf_counter()
    merged = DistInfo().gather_results(records, chunk_records=chunk)
    seconds = time.perf_counter() - t
    if rank == 0:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"seconds": seconds, "peak_growth_mb": peak - base, "records": len(merged)}, f)
    torch_dist.destroy_process_group()


def gather_peak(chunk):
    """Rank 0's peak memory growth and seconds gathering 2 ranks' records (fresh processes)."""
    import tempfile

    import torch.multiprocessing as mp

    from up_trainer.engine.distributed import GATHER_CHUNK_RECORDS

    chunk = GATHER_CHUNK_RECORDS if chunk == "default" else chunk
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.json")
        mp.spawn(_gather_rank, args=(2, chunk, os.path.join(tmp, "init"), out), nprocs=2, join=True)
        with open(out, encoding="utf-8") as f:
            return dict(json.load(f), chunk=chunk)


def in_subprocess(name, *args):
    cmd = [sys.executable, __file__, "--measure", name, "--args", json.dumps(args)]
    # the up_trainer of the tree this script is in, whatever is installed
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


MEASURES = {"index_pycocotools": index_pycocotools, "index_ours": index_ours, "worker_memory": worker_memory,
            "eval_time": eval_time, "startup": startup, "coco_load_pair": coco_load_pair,
            "gather_peak": gather_peak}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="/tmp/up_scale")
    p.add_argument("--images", type=int, default=N_IMAGES)
    p.add_argument("--only", default="index,workers,eval,startup,gather")
    p.add_argument("--profile", help="startup: write a cProfile of the large run to this file")
    p.add_argument("--measure", help=argparse.SUPPRESS)
    p.add_argument("--args", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.measure:
        print(json.dumps(MEASURES[a.measure](*json.loads(a.args))))
        return
    os.makedirs(a.work, exist_ok=True)
    t = time.perf_counter()
    ann, img_dir = generate(a.work, a.images)
    print(f"data: {a.images} images ({time.perf_counter() - t:.1f} s to generate or find), load {os.getloadavg()[0]:.1f}")
    only = a.only.split(",")
    if "index" in only:
        ref, ours = in_subprocess("index_pycocotools", ann, img_dir), in_subprocess("index_ours", ann, img_dir)
        print(f"index: pycocotools {ref['seconds']:.2f} s +{ref['held_mb']:.0f} MB; up {ours['seconds']:.2f} s "
              f"+{ours['held_mb']:.0f} MB; ratio time {ours['seconds'] / ref['seconds']:.2f}x, "
              f"memory {ours['held_mb'] / max(ref['held_mb'], 1):.2f}x (load {os.getloadavg()[0]:.1f})")
    if "workers" in only:
        for workers in (2, 4):
            m = in_subprocess("worker_memory", ann, img_dir, workers)
            print(f"workers: {workers} workers, private MB after a pass {m['private_mb']}, grown over it "
                  f"{m['growth_mb']} "
                  f"(pass {m['pass_seconds']:.0f} s, load {os.getloadavg()[0]:.1f})")
    if "eval" in only:
        ref, ours = in_subprocess("eval_time", ann, img_dir, "pycocotools"), in_subprocess("eval_time", ann, img_dir, "auto")
        print(f"eval: {EVAL_IMAGES} images x 100 detections: pycocotools {ref['seconds']:.2f} s, up (auto backend) "
              f"{ours['seconds']:.2f} s: {ours['seconds'] / ref['seconds']:.3f}x (load {os.getloadavg()[0]:.1f})")
    if "startup" in only:
        val = subset(ann, EVAL_IMAGES, os.path.join(a.work, f"instances_val{EVAL_IMAGES}.json"))
        small = subset(ann, STARTUP_SMALL, os.path.join(a.work, f"instances_{STARTUP_SMALL}.json"))
        runs = {"small": (small, small), "large": (ann, val)}
        # the faster of two runs each (a shared box's load comes and goes), in alternation
        trials = [(k, in_subprocess("startup", *files, img_dir)) for _ in range(2) for k, files in runs.items()]
        up = {k: min((m for name, m in trials if name == k), key=lambda m: m["seconds"]) for k in runs}
        ref = {k: in_subprocess("coco_load_pair", *files) for k, files in runs.items()}
        if a.profile:  # a run of its own: the profiler's overhead stays out of the times above
            in_subprocess("startup", ann, val, img_dir, a.profile)
        extra = {k: up["large"][k] - up["small"][k] for k in ("seconds", "cpu_seconds")}
        ref_extra = {k: ref["large"][k] - ref["small"][k] for k in ("seconds", "cpu_seconds")}
        print(f"startup: up train --dry-run {up['small']['seconds']:.1f} s with {STARTUP_SMALL} images, "
              f"{up['large']['seconds']:.1f} s with {a.images} + {EVAL_IMAGES}: +{extra['seconds']:.1f} s "
              f"(CPU +{extra['cpu_seconds']:.1f} s; "
              f"peak {up['small']['peak_mb']:.0f} -> {up['large']['peak_mb']:.0f} MB, "
              f"+{up['large']['peak_mb'] - up['small']['peak_mb']:.0f}); pycocotools COCO() of the same two files "
              f"+{ref_extra['seconds']:.1f} s (CPU +{ref_extra['cpu_seconds']:.1f} s; "
              f"+{ref['large']['held_mb'] - ref['small']['held_mb']:.0f} MB held): "
              f"{extra['seconds'] / max(ref_extra['seconds'], 1e-3):.1f}x wall, "
              f"{extra['cpu_seconds'] / max(ref_extra['cpu_seconds'], 1e-3):.1f}x CPU (load {os.getloadavg()[0]:.1f})")

    if "gather" in only:
        for chunk in (None, "default"):
            m = in_subprocess("gather_peak", chunk)
            rounds = "one round" if chunk is None else f"rounds of {m['chunk']}"
            print(f"gather: {m['records']} records of 100 detections from 2 ranks, {rounds}: {m['seconds']:.2f} s, "
                  f"rank 0 peak +{m['peak_growth_mb']:.0f} MB (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
