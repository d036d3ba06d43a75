"""Feature mimic on a Faster R-CNN, measured: a ResNet-50 teacher is trained on digit scenes,
then a ResNet-18 student is trained alone and with UP's FPN feature mimic from that teacher
(the job of UP's faster_rcnn_r152_50_1x_feature_mimic.yaml: l2_loss with feat_norm and
batch_mean on neck.p2_conv .. neck.p6_pool), over a few seeds, same data, schedule and seeds.
Prints a reStructuredText table of bbox AP / AP50 after the last epoch and the load average.

    python benchmarks/det_distill.py --work runs/det_distill [--seeds 0 1] [--train-images 400]

The net is UP's Faster R-CNN net list (resnet + FPN + NaiveRPN + rpn_post + BboxFC_Pre + BboxFC +
bbox_post) as in UP's distiller files, sized for 64-pixel scenes (FPN and RPN width 64, anchors
of 16 px at stride 4, BatchNorm trained: no ImageNet weights here; AdamW, cosine schedule, gradient
norm clipped at 10). Each run is one ``up train``
process with ``runtime.num_threads: 1``; runs already finished in ``--work`` are read, not
trained again.
"""
import argparse
import copy
import glob
import json
import os
import platform
import subprocess
import sys
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UP_FILE = os.path.join(REPO, "tests", "fixtures", "up", "distiller", "det", "faster_rcnn",
                       "faster_rcnn_r152_50_1x_feature_mimic.yaml")
FPN_NAMES = ["neck.p2_conv", "neck.p3_conv", "neck.p4_conv", "neck.p5_conv", "neck.p6_pool"]


def net_list(backbone):
    """UP's student net list of the feature-mimic file, resized for digit scenes."""
    with open(UP_FILE) as f:
        net = copy.deepcopy(yaml.safe_load(f)["net"])
    parts = {e["name"]: e["kwargs"] for e in net}
    net[0]["type"] = backbone
    parts["backbone"].update(frozen_layers=[], normalize={"type": "solo_bn"})
    parts["neck"]["outplanes"] = 64
    parts["roi_head"]["feat_planes"] = 64
    parts["post_process"]["cfg"]["anchor_generator"]["kwargs"]["anchor_scales"] = [4]
    for mode in ("train", "test"):
        predictor = parts["post_process"]["cfg"][mode]["roi_predictor"]["kwargs"]
        predictor.update(pre_nms_top_n=300, post_nms_top_n=100)
        predictor["merger"]["kwargs"]["top_n"] = 100
    parts["bbox_head_pre_process"]["cfg"]["bbox_supervisor"]["kwargs"]["sampler"]["kwargs"]["batch_size"] = 128
    parts["bbox_head"].update(feat_planes=256, num_classes=11)  # 10 digits and the background
    return net


def config(backbone, seed, args, teacher_weight=None):
    scenes = {"canvas_size": 64, "digits_per_image": [1, 4], "scale_range": [12, 24], "noise": 0.05}
    cfg = {
        "runtime": {"seed": seed, "num_threads": 1},
        "dataset": {"train": {"type": "digits_det", "kwargs": {"split": "train", "num_images": args.train_images,
                                                               "seed": 0, **scenes}},
                    "test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": args.val_images,
                                                              "seed": 1, **scenes}},
                    "batch_size": 8, "test_batch_size": 50, "num_workers": 0},
        "trainer": {"max_epoch": args.teacher_epochs if teacher_weight is None and backbone == args.teacher
                    else args.epochs,
                    "optimizer": {"type": "AdamW", "kwargs": {"lr": args.lr, "weight_decay": 0.0001}},
                    # from scratch, at lr 0.001 without clipping the R-50's losses blew up after warm-up
                    "clip_grad": {"mode": "pre_defined", "max_norm": 10},
                    "lr_scheduler": {"type": "cosine", "warmup_iter": 50, "warmup_ratio": 0.01}},
        "saver": {"save_dir": "checkpoints"},
        "net": net_list(backbone),
    }
    if teacher_weight is not None:
        cfg["distill"] = {"teachers": [{"name": "teacher", "net": net_list(args.teacher), "weight": teacher_weight}],
                          "mimic": [{"name": "fpn", "student": FPN_NAMES, "teachers": {"teacher": FPN_NAMES},
                                     "losses": {"loss": {"type": "l2_loss",
                                                         "kwargs": {"feat_norm": True, "batch_mean": True}}},
                                     "loss_weight": args.loss_weight}]}
    return cfg


def final_metrics(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    evals = [json.loads(line) for line in open(path) if '"eval"' in line]
    return evals[-1] if evals else None


def train(name, cfg, args):
    run = os.path.join(args.work, name)
    done = final_metrics(run)
    if done is not None and done.get("epoch") == cfg["trainer"]["max_epoch"]:
        return done, None
    os.makedirs(args.work, exist_ok=True)
    path = os.path.join(args.work, f"{name}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    start = time.time()
    subprocess.run([sys.executable, "-m", "up_trainer", "train", "--config", path, "--work-dir", run,
                    "--device", "cpu"], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    minutes = (time.time() - start) / 60
    print(f"{name}: {minutes:.1f} min, load {os.getloadavg()[0]:.1f}", flush=True)
    return final_metrics(run), minutes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="runs/det_distill")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--train-images", type=int, default=400)
    parser.add_argument("--val-images", type=int, default=200)
    parser.add_argument("--teacher", default="resnet50")
    parser.add_argument("--student", default="resnet18")
    parser.add_argument("--teacher-epochs", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=4, help="the students' epochs")
    parser.add_argument("--loss-weight", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=0.0003, help="AdamW's (0.001: the R-50's losses spiked)")
    args = parser.parse_args()
    args.work = os.path.abspath(args.work)
    teacher, _ = train("teacher", config(args.teacher, 0, args), args)
    ckpts = sorted(glob.glob(os.path.join(args.work, "teacher", "checkpoints", "ckpt_e*.pth")),
                   key=lambda p: int(p.rsplit("_e", 1)[1].split(".")[0]))
    rows = {"alone": {}, "feature mimic": {}}
    for seed in args.seeds:
        rows["alone"][seed] = train(f"alone_s{seed}", config(args.student, seed, args), args)[0]
        rows["feature mimic"][seed] = train(f"mimic_s{seed}", config(args.student, seed, args, ckpts[-1]), args)[0]
    print(f"\nteacher {args.teacher}, {args.teacher_epochs} epochs: bbox AP {teacher['bbox.AP']:.4f}, "
          f"AP50 {teacher['bbox.AP50']:.4f}")
    print(f"student {args.student}, {args.epochs} epochs, {args.train_images} train / {args.val_images} val scenes; "
          "bbox AP (AP50) per seed")
    print("=" * 16 + "  " + "  ".join("=" * 15 for _ in args.seeds) + "  " + "=" * 15)
    print(f"{'':16}  " + "  ".join(f"seed {s:<10}" for s in args.seeds) + "  mean")
    print("=" * 16 + "  " + "  ".join("=" * 15 for _ in args.seeds) + "  " + "=" * 15)
    for name, per_seed in rows.items():
        aps = [per_seed[s]["bbox.AP"] for s in args.seeds]
        ap50s = [per_seed[s]["bbox.AP50"] for s in args.seeds]
        cells = "  ".join(f"{a:.4f} ({b:.4f})" for a, b in zip(aps, ap50s))
        print(f"{name:16}  {cells}  {sum(aps) / len(aps):.4f} ({sum(ap50s) / len(ap50s):.4f})")
    print("=" * 16 + "  " + "  ".join("=" * 15 for _ in args.seeds) + "  " + "=" * 15)
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
