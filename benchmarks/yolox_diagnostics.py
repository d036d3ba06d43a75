"""The two measurements behind docs/detection/small_data.rst ("Why YOLOX learned slowly"):

``bn``: a checkpoint (its EMA weights, or ``--raw``) evaluated on the config's val set twice,
with the BatchNorm statistics it stored and with statistics re-estimated from the same weights
over ``--batches`` train batches (plain average); prints the validation losses and AP of both
and the layers whose stored statistics are furthest off (mean in standard deviations,
variance ratio).

``simota``: trains from scratch for ``--iters`` updates and prints per update the loss terms,
positive points per box, SimOTA's dynamic k (mean, share of boxes at k = 1), the mean IoU of
the matched predictions and the mean objectness.

    python benchmarks/yolox_diagnostics.py bn --config configs/det/small_data_yolox.yaml \
        --checkpoint runs/recipes/yolox/checkpoints/ckpt_e1.pth --opts dataset.train.kwargs.ann_file=...
    python benchmarks/yolox_diagnostics.py simota --config configs/det/small_data_yolox.yaml --iters 16 --opts ...
"""
import argparse
import json
import sys
import tempfile

import torch


def build(config, opts, work_dir):
    from up_trainer.config import resolve_config
    from up_trainer.engine.builder import build_trainer

    return build_trainer(resolve_config(config, opts), work_dir=work_dir, with_optim=False)


def evaluate(trainer, model):
    from up_trainer.data.model_input import batch_to_model

    model.eval()
    trainer.evaluator.reset()
    losses = []
    with torch.no_grad():
        for batch in trainer.loaders.test_loader():
            batch = batch_to_model(batch, "cpu")
            out = model(batch)
            losses.append({k: float(v) for k, v in out.items() if k.startswith("loss")})
            trainer.evaluator.process(batch, out)
    metrics = trainer.evaluator.evaluate(trainer.evaluator.results())
    mean = {k: round(sum(row[k] for row in losses) / len(losses), 3) for k in losses[0]}
    return mean, metrics["bbox.AP"], metrics["bbox.AP50"]


def bn(args):
    from up_trainer.data.model_input import batch_to_model

    with tempfile.TemporaryDirectory() as work:
        trainer = build(args.config, args.opts, work)
        model = trainer.model
        ckpt = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
        model.load_state_dict(ckpt["model"] if args.raw else ckpt["ema"]["model"])
        print("stored statistics:      losses %s AP %.3f AP50 %.3f" % evaluate(trainer, model))
        bns = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)}
        stored = {n: (m.running_mean.clone(), m.running_var.clone()) for n, m in bns.items()}
        for m in bns.values():
            m.reset_running_stats()
            m.momentum = None  # torch's plain average
        model.train()
        with torch.no_grad():
            for i, batch in enumerate(trainer.loaders.train_loader(0)):
                x, _ = model.batch_images(batch_to_model(batch, "cpu")["image"])
                model.roi_head(model.neck(model.backbone(x)))
                if i + 1 == args.batches:
                    break
        print("re-estimated (%d batches): losses %s AP %.3f AP50 %.3f" % ((args.batches,) + evaluate(trainer, model)))
        rows = []
        for n, m in bns.items():
            mean, var = stored[n]
            off = ((mean - m.running_mean).abs() / m.running_var.sqrt()).max().item()
            ratio = (var / m.running_var).log().abs().max().exp().item()
            rows.append((off, ratio, n))
        for off, ratio, n in sorted(rows)[-args.top:]:
            print(f"  {n:45s} stored mean {off:6.2f} std off, variance ratio {ratio:5.2f}")


def simota(args):
    from up_trainer.cli import main
    from up_trainer.tasks.det import simota as assigner_module
    from up_trainer.tasks.det.yolox import losses

    ks, seen = [], {"updates": 0}
    dynamic_k = assigner_module.SimOTAAssigner.dynamic_k

    def recording_dynamic_k(self, cost, ious):
        top = ious.topk(min(self.candidate_k, ious.shape[1]), dim=1).values.sum(1).int()
        ks.extend(top.clamp(min=self.min_k, max=cost.shape[1]).tolist())
        return dynamic_k(self, cost, ious)

    criterion = losses.YoloxCriterion.__call__

    def recording_criterion(self, outputs, targets, use_l1=False, img_sizes=None):
        ks.clear()
        out = criterion(self, outputs, targets, use_l1, img_sizes)
        if not torch.is_grad_enabled():
            return out
        seen["updates"] += 1
        boxes = sum(len(t["boxes"]) for t in targets)
        matched = []
        for i, t in enumerate(targets):  # the assignment again, for its positives and IoUs
            a = self.assigner.assign(outputs["centers"], outputs["strides"], outputs["cls"][i].detach(),
                                     outputs["box"][i].detach(), outputs["obj"][i].detach(), t["boxes"].float(),
                                     t["labels"], None if img_sizes is None else img_sizes[i])
            matched.append(a.matched_iou)
        matched = torch.cat(matched)
        k = ks[: boxes]
        print(json.dumps({"update": seen["updates"], **{n: round(float(v), 3) for n, v in out.items()},
                          "positives_per_box": round(len(matched) / max(boxes, 1), 2),
                          "k_mean": round(sum(k) / max(len(k), 1), 2),
                          "k1_share": round(sum(v == 1 for v in k) / max(len(k), 1), 2),
                          "matched_iou": round(float(matched.mean()), 3) if len(matched) else 0.0,
                          "objectness": round(float(outputs["obj"].detach().sigmoid().mean()), 4)}), flush=True)
        if seen["updates"] >= args.iters:
            raise SystemExit(0)
        return out

    assigner_module.SimOTAAssigner.dynamic_k = recording_dynamic_k
    losses.YoloxCriterion.__call__ = recording_criterion
    with tempfile.TemporaryDirectory() as work:
        sys.argv = ["up", "train", "--config", args.config, "--work-dir", work, "--opts", *args.opts,
                    "hooks.train_val_logger.kwargs.freq=1000"]
        main()


def parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("bn")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--raw", action="store_true", help="the raw weights, not the EMA")
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--top", type=int, default=6)
    s = sub.add_parser("simota")
    s.add_argument("--iters", type=int, default=16)
    for q in (p, s):
        q.add_argument("--config", required=True)
        q.add_argument("--opts", nargs="*", default=[])
    return parser.parse_args()


if __name__ == "__main__":
    torch.set_num_threads(1)
    args = parse()
    bn(args) if args.what == "bn" else simota(args)
