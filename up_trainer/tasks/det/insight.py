"""Where a detector fails, from the COCO evaluator's records and its COCOeval.

Written to ``out_dir``:

* ``pr_curves.png``: precision against recall per class at IoU 0.5 (COCO's 101 recall
  points, all areas, max_dets), AP50 in the legend;
* ``confusion_matrix.csv`` / ``.png``: rows the true class plus ``background`` (a detection
  that matched no object), columns the predicted class plus ``background`` (an object no
  detection found). Detections with score >= ``score_thr`` are matched greedily, highest
  score first, to the unmatched object of any class with the highest IoU >= ``iou_thr``;
  detections mostly inside an ignore region are left out;
* ``ap_by_size.csv`` / ``.png``: AP@[.5:.95] per class for all, small (< 32² px), medium and
  large (> 96² px) objects, -1 where the class has no object of that size.
"""
import os

import torch

from ..insight_io import Insight, confusion_figure, save_figure, write_csv

SIZES = ("all", "small", "medium", "large")  # COCOeval's areaRng order


def confusion_with_background(records, num_classes, score_thr=0.3, iou_thr=0.5):
    """(num_classes + 1) square counts; index num_classes is the background."""
    from torchvision.ops import box_iou

    bg = num_classes
    m = [[0] * (num_classes + 1) for _ in range(num_classes + 1)]
    for r in records:
        gt = torch.tensor(r["gt_boxes"], dtype=torch.float32).reshape(-1, 4)
        gt_labels = [int(v) - 1 for v in r["gt_labels"]]
        keep = [i for i, s in enumerate(r["scores"]) if s >= score_thr and 1 <= r["labels"][i] <= num_classes]
        keep.sort(key=lambda i: -r["scores"][i])
        dets = torch.tensor([r["boxes"][i] for i in keep], dtype=torch.float32).reshape(-1, 4)
        det_labels = [int(r["labels"][i]) - 1 for i in keep]
        ignored = _inside_ignore(dets, r.get("ignore_boxes") or [])
        iou = box_iou(dets, gt) if len(dets) and len(gt) else torch.zeros(len(dets), len(gt))
        taken = [False] * len(gt)
        for d in range(len(dets)):
            best, best_iou = None, iou_thr
            for g in range(len(gt)):
                if not taken[g] and float(iou[d, g]) >= best_iou:
                    best, best_iou = g, float(iou[d, g])
            if best is not None:
                taken[best] = True
                m[gt_labels[best]][det_labels[d]] += 1
            elif not ignored[d]:
                m[bg][det_labels[d]] += 1
        for g, t in enumerate(taken):
            if not t:
                m[gt_labels[g]][bg] += 1
    return m


def _inside_ignore(dets, ignore_boxes, frac=0.5):
    if not len(dets) or not ignore_boxes:
        return [False] * len(dets)
    ig = torch.tensor(ignore_boxes, dtype=torch.float32).reshape(-1, 4)
    lt = torch.max(dets[:, None, :2], ig[None, :, :2])
    rb = torch.min(dets[:, None, 2:], ig[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(dim=2)
    area = (dets[:, 2:] - dets[:, :2]).clamp(min=0).prod(dim=1).clamp(min=1e-6)
    return ((inter / area[:, None]).max(dim=1).values >= frac).tolist()


def ap_by_size(coco_eval, num_classes):
    """[[AP all, small, medium, large] per class] from COCOeval's precision array."""
    precision = coco_eval.eval["precision"]  # [T, R, K, A, M]
    out = []
    for k in range(num_classes):
        row = []
        for a in range(len(SIZES)):
            p = precision[:, :, k, a, -1]
            p = p[p > -1]
            row.append(float(p.mean()) if p.size else -1.0)
        out.append(row)
    return out


def _pr_figure(coco_eval, classes):
    from matplotlib.figure import Figure

    import numpy as np

    precision = coco_eval.eval["precision"]
    recall = np.asarray(coco_eval.params.recThrs)
    fig = Figure(figsize=(6.5, 5), dpi=100)
    ax = fig.subplots()
    for k, name in enumerate(classes):
        p = precision[0, :, k, 0, -1]
        if (p > -1).any():
            valid = p > -1
            ax.plot(recall[valid], p[valid], label=f"{name} (AP50 {p[valid].mean():.3f})", linewidth=1.2)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_title("precision-recall per class at IoU 0.5")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="x-small", loc="lower left", ncol=2 if len(classes) > 10 else 1)
    fig.tight_layout()
    return fig


def _size_figure(rows, classes):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 0.6 * len(classes) + 2), 4), dpi=100)
    ax = fig.subplots()
    width = 0.8 / len(SIZES)
    for a, size in enumerate(SIZES):
        values = [max(r[a], 0.0) for r in rows]
        ax.bar([k + (a - 1.5) * width for k in range(len(classes))], values, width, label=size)
    ax.set_xticks(range(len(classes)), labels=classes, rotation=90 if len(classes) > 10 else 0, fontsize="small")
    ax.set_ylabel("AP@[.5:.95]")
    ax.set_ylim(0, 1)
    ax.set_title("AP per class and object size (absent sizes drawn as 0)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def write_insight(records, classes, coco_eval, out_dir, score_thr=0.3, iou_thr=0.5):
    result = Insight()
    names = list(classes) + ["background"]
    matrix = confusion_with_background(records, len(classes), score_thr, iou_thr)
    result.files.append(write_csv(os.path.join(out_dir, "confusion_matrix.csv"), ["true \\ predicted"] + names,
                                  [[names[i]] + row for i, row in enumerate(matrix)]))
    path = os.path.join(out_dir, "confusion_matrix.png")
    result.images["insight/confusion_matrix"] = save_figure(confusion_figure(
        matrix, names, names, f"detections (score >= {score_thr:g}) matched at IoU >= {iou_thr:g}"), path)
    result.files.append(path)
    if coco_eval is None:  # no detection at all: no curve and no AP to draw
        return result
    path = os.path.join(out_dir, "pr_curves.png")
    result.images["insight/pr_curves"] = save_figure(_pr_figure(coco_eval, classes), path)
    result.files.append(path)
    rows = ap_by_size(coco_eval, len(classes))
    result.files.append(write_csv(os.path.join(out_dir, "ap_by_size.csv"), ["class", *SIZES],
                                  [[c] + [round(v, 6) for v in row] for c, row in zip(classes, rows)]))
    path = os.path.join(out_dir, "ap_by_size.png")
    result.images["insight/ap_by_size"] = save_figure(_size_figure(rows, classes), path)
    result.files.append(path)
    for c, row in zip(classes, rows):
        for size, v in zip(SIZES[1:], row[1:]):
            if v >= 0:
                result.scalars[f"insight/AP_{size}/{c}"] = v
    return result
