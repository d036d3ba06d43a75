"""COCO box AP through pycocotools or faster-coco-eval (UP's ``COCO`` evaluator).

Metric keys: ``bbox.AP`` (AP@[.50:.95], the primary metric auto_save_best watches),
``bbox.AP50``, ``bbox.AP75``, ``bbox.APs``, ``bbox.APm``, ``bbox.APl``, ``bbox.AR100`` (all
in [0, 1], -1 where COCO has nothing to measure, e.g. no small objects),
``bbox.AP.<class>`` per class, and ``val_loss`` when the model returned its losses with the
detections (RetinaNet, FCOS: the mean over images of their batch's loss). The per-class AP table is logged.

Ground truth travels with the batches (``target`` in original image coordinates after
undoing the resize), so the evaluator needs no dataset handle and works the same after a
distributed gather. Predictions are scaled by ``orig_size / img_size`` back to the original
image, labels map back to dataset category ids (``batch["meta"]["cat_ids"]``).

``backend``: ``auto`` runs faster-coco-eval when it is installed (same numbers, several
times faster; see :mod:`.coco_backend`), else pycocotools.
"""
import json
import logging
import os

from typing import Optional

import torch

from ...atomic import write_json
from ...registry import EVALUATORS

log = logging.getLogger("up")
SUMMARY_KEYS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")
REPORTED = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR100")


def _scale(target):
    """(sx, sy) mapping transformed-image coordinates back to the original image."""
    oh, ow = (int(v) for v in target["orig_size"])
    ih, iw = (int(v) for v in target.get("img_size", target["orig_size"]))
    return ow / iw, oh / ih


def _to_original(boxes, sx, sy):
    boxes = boxes.detach().float().cpu().reshape(-1, 4).clone()
    boxes[:, 0::2] *= sx
    boxes[:, 1::2] *= sy
    return boxes


@EVALUATORS.register("COCO", aliases=("coco",))
class CocoEvaluator:
    """COCO bbox AP, AP50, AP75, APs/m/l, AR100 (keys bbox.*) and per-class AP via pycocotools.

    The ground truth comes with the test batches (the test dataset's annotations). UP's
    ``gt_file`` names that same annotation file; it is accepted and not read again."""

    def __init__(self, iou_types: list = ("bbox",), per_class: bool = True, max_dets: int = 100,
                 backend: str = "auto", gt_file: Optional[str] = None):
        from ...errors import ConfigError
        from .coco_backend import resolve_backend

        if list(iou_types) != ["bbox"]:
            raise ConfigError("iou_types", f"only ['bbox'] is supported, got {list(iou_types)}")
        self.backend = resolve_backend(backend)
        self.per_class = per_class
        self.max_dets = max_dets
        self.primary_metric = "bbox.AP"
        self.classes, self.cat_ids = None, None
        self._records = []

    def metric_keys(self):
        keys = [f"bbox.{k}" for k in REPORTED]
        if self.per_class and self.classes:
            keys += [f"bbox.AP.{c}" for c in self.classes]
        return keys

    def reset(self):
        self._records = []

    @torch.no_grad()
    def process(self, batch, outputs):
        meta = batch.get("meta") or {}
        if meta and self.classes is None:
            self.classes, self.cat_ids = list(meta["classes"]), list(meta["cat_ids"])
        dets = outputs["detections"]
        # The batch's loss (a mean over its images) on each of its records: averaged over the
        # unique records at the end, it is the image-weighted validation loss.
        loss_terms = [v for k, v in outputs.items() if "loss" in k and isinstance(v, torch.Tensor)]
        batch_loss = float(sum(t.detach().float() for t in loss_terms)) if loss_terms else None
        for index, target, det in zip(batch["index"].tolist(), batch["target"], dets):
            sx, sy = _scale(target)
            rec = {"index": int(index), "image_id": int(target["image_id"]),
                   "height": int(target["orig_size"][0]), "width": int(target["orig_size"][1]),
                   "gt_boxes": _to_original(target["boxes"], sx, sy).tolist(),
                   "gt_labels": target["labels"].tolist(),
                   "ignore_boxes": _to_original(target.get("ignore_boxes", torch.zeros(0, 4)), sx, sy).tolist(),
                   "boxes": _to_original(det["boxes"], sx, sy).tolist(),
                   "scores": det["scores"].detach().float().cpu().tolist(),
                   "labels": det["labels"].tolist()}
            if "area" in target:
                rec["gt_area"] = target["area"].tolist()
            if batch_loss is not None:
                rec["loss"] = batch_loss
            self._records.append(rec)

    def results(self):
        # The label map rides along so rank 0 can evaluate whatever ranks saw the batches.
        return [dict(r, _classes=self.classes, _cat_ids=self.cat_ids) for r in self._records]

    # -- COCO conversion ------------------------------------------------------------------------
    def _label_map(self, results):
        for r in results:
            if r.get("_classes"):
                return r["_classes"], r["_cat_ids"]
        n = max((max(r["gt_labels"] + r["labels"], default=0) for r in results), default=0)
        return [str(i) for i in range(1, n + 1)], list(range(1, n + 1))

    @staticmethod
    def unique(results):
        return [r for _, r in sorted({r["index"]: r for r in results}.items())]

    def to_coco(self, results):
        """(gt dict, detection list) in COCO format, category ids = the dataset's."""
        classes, cat_ids = self._label_map(results)
        images, anns, dets = [], [], []
        for r in self.unique(results):
            images.append({"id": r["image_id"], "height": r["height"], "width": r["width"]})
            areas = r.get("gt_area") or [None] * len(r["gt_boxes"])
            for box, label, area in zip(r["gt_boxes"], r["gt_labels"], areas):
                w, h = box[2] - box[0], box[3] - box[1]
                anns.append({"id": len(anns) + 1, "image_id": r["image_id"], "category_id": cat_ids[label - 1],
                             "bbox": [box[0], box[1], w, h], "area": area if area is not None else w * h,
                             "iscrowd": 0})
            for box in r["ignore_boxes"]:
                w, h = box[2] - box[0], box[3] - box[1]
                # COCO treats a crowd box as a region: detections inside it are neither TP nor FP.
                anns.append({"id": len(anns) + 1, "image_id": r["image_id"], "category_id": cat_ids[0],
                             "bbox": [box[0], box[1], w, h], "area": w * h, "iscrowd": 1, "ignore": 1})
                for cid in cat_ids[1:]:
                    anns.append(dict(anns[-1], id=len(anns) + 1, category_id=cid))
            for box, score, label in zip(r["boxes"], r["scores"], r["labels"]):
                if 1 <= label <= len(cat_ids):
                    dets.append({"image_id": r["image_id"], "category_id": cat_ids[label - 1],
                                 "bbox": [round(box[0], 3), round(box[1], 3), round(box[2] - box[0], 3),
                                          round(box[3] - box[1], 3)], "score": round(score, 5)})
        gt = {"images": images, "annotations": anns,
              "categories": [{"id": cid, "name": name} for cid, name in zip(cat_ids, classes)]}
        return gt, dets

    def evaluate(self, results):
        from .coco_backend import run_bbox_eval

        classes, cat_ids = self._label_map(results)
        self.classes, self.cat_ids = classes, cat_ids
        self.coco_eval = None  # the COCOeval of this evaluation (insight reads its precision array)
        gt_dict, dets = self.to_coco(results)
        metrics = {f"bbox.{k}": -1.0 for k in REPORTED}
        if not gt_dict["images"]:
            return metrics
        losses = [r["loss"] for r in self.unique(results) if "loss" in r]
        val_loss = {"val_loss": sum(losses) / len(losses)} if losses else {}
        if not dets:
            log.warning("COCO evaluator: no detections at all; every AP is 0")
            return {**{f"bbox.{k}": 0.0 for k in REPORTED},
                    **({f"bbox.AP.{c}": 0.0 for c in classes} if self.per_class else {}), **val_loss}
        ev, _ = run_bbox_eval(gt_dict, dets, self.backend, self.max_dets)
        self.coco_eval = ev
        rows = [f"  {k:<6} {v:>7.4f}" for k, v in zip(SUMMARY_KEYS, ev.stats)]
        log.info("COCO bbox evaluation (%s):\n%s", self.backend, "\n".join(rows))
        metrics = {f"bbox.{k}": float(v) for k, v in zip(SUMMARY_KEYS, ev.stats) if k in REPORTED}
        if self.per_class:
            per_class = self._per_class_ap(ev, cat_ids)
            rows = [f"  {'class':<16} {'AP':>7}"] + [f"  {c:<16} {ap:>7.4f}" for c, ap in zip(classes, per_class)]
            log.info("per-class bbox AP:\n%s", "\n".join(rows))
            metrics.update({f"bbox.AP.{c}": ap for c, ap in zip(classes, per_class)})
        return {**metrics, **val_loss}

    def insight(self, results, out_dir, dataset=None, score_thr=0.3):
        """PR curves, confusion matrix with background, AP by object size (see :mod:`.insight`),
        from the COCOeval of the latest :meth:`evaluate` on these results."""
        from .insight import write_insight

        classes, _ = self._label_map(results)
        return write_insight(self.unique(results), classes, getattr(self, "coco_eval", None), out_dir, score_thr)

    @staticmethod
    def _per_class_ap(ev, cat_ids):
        # precision: [T iou thresholds, R recall points, K classes, A areas, M maxDets]; -1 = absent
        precision = ev.eval["precision"]
        out = []
        for k, _ in enumerate(cat_ids):
            p = precision[:, :, k, 0, -1]
            p = p[p > -1]
            out.append(float(p.mean()) if p.size else -1.0)
        return out

    def write_results(self, results, path):
        """COCO results JSON (list of {image_id, category_id, bbox xywh, score}) next to ``path``
        as ``results.bbox.json``; ``path`` itself gets one JSON line per image."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        _, dets = self.to_coco(results)
        write_json(os.path.join(os.path.dirname(path) or ".", "results.bbox.json"), dets)
        classes, cat_ids = self._label_map(results)
        with open(path, "w", encoding="utf-8") as f:
            for r in self.unique(results):
                f.write(json.dumps({"index": r["index"], "image_id": r["image_id"], "boxes": r["boxes"],
                                    "scores": r["scores"], "labels": r["labels"],
                                    "category_ids": [cat_ids[lab - 1] for lab in r["labels"]
                                                     if 1 <= lab <= len(cat_ids)]}) + "\n")
