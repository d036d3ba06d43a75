"""LVIS's federated box AP on pycocotools' COCOeval (lvis-api's rules, without the lvis package).

LVIS labels each category on a subset of images only, so (as lvis-api's LVISEval does):

- a category is scored on the images where it is present (has a box) or verified absent
  (``neg_category_ids``); detections of any other category on an image are dropped;
- on an image where a category is ``not_exhaustive`` (not every instance labelled), its
  detections that match no box are ignored, neither true nor false positives;
- at most ``max_dets`` (300) detections per image, the highest scoring, over all categories;
- AP as COCO's (10 IoU thresholds, 101 recall points, area ranges all/small/medium/large),
  averaged over the categories with something to score, and APr/APc/APf over the rare, common
  and frequent categories; AR is recall at ``max_dets``.
"""
import contextlib
import io
from collections import defaultdict

import numpy as np

KEYS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "APr", "APc", "APf", "AR300")


def federated_dets(gt_dict, dets, image_lists, max_dets):
    """The detections LVIS scores: on each image, those of its present or verified-absent
    categories, the best ``max_dets`` of them."""
    present = defaultdict(set)
    for ann in gt_dict["annotations"]:
        present[ann["image_id"]].add(ann["category_id"])
    by_image = defaultdict(list)
    for d in dets:
        neg = image_lists.get(d["image_id"], {}).get("neg_category_ids", set())
        if d["category_id"] in present[d["image_id"]] or d["category_id"] in neg:
            by_image[d["image_id"]].append(d)
    kept = []
    for image_dets in by_image.values():
        kept += sorted(image_dets, key=lambda d: -d["score"])[:max_dets]
    return kept


def _mean(values):
    values = values[values > -1]
    return float(values.mean()) if values.size else -1.0


def lvis_metrics(gt_dict, dets, image_lists, frequencies, max_dets=300):
    """{key: value} for :data:`KEYS` (-1 where nothing is measured), and the COCOeval used
    (None without detections)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    not_exhaustive = {(img, cat) for img, lists in image_lists.items()
                      for cat in lists.get("not_exhaustive_category_ids", ())}

    class FederatedEval(COCOeval):
        def evaluateImg(self, imgId, catId, aRng, maxDet):
            out = super().evaluateImg(imgId, catId, aRng, maxDet)
            if out is not None and (imgId, catId) in not_exhaustive:
                out["dtIgnore"] = np.logical_or(out["dtIgnore"], out["dtMatches"] == 0)
            return out

    dets = federated_dets(gt_dict, dets, image_lists, max_dets)
    if not dets:
        return {k: 0.0 for k in KEYS}, None
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = gt_dict
        gt.createIndex()
        ev = FederatedEval(gt, gt.loadRes(dets), "bbox")
        ev.params.maxDets = [max_dets]
        ev.evaluate()
        ev.accumulate()
    p = ev.eval["precision"][..., 0]  # [T, R, K, A]
    r = ev.eval["recall"][..., 0]     # [T, K, A]
    out = {"AP": _mean(p[..., 0]), "AP50": _mean(p[0, ..., 0]), "AP75": _mean(p[5, ..., 0]),
           "APs": _mean(p[..., 1]), "APm": _mean(p[..., 2]), "APl": _mean(p[..., 3])}
    cats = list(ev.params.catIds)
    for f in ("r", "c", "f"):
        ks = [k for k, c in enumerate(cats) if frequencies.get(c) == f]
        out[f"AP{f}"] = _mean(p[:, :, ks, 0]) if ks else -1.0
    out["AR300"] = _mean(r[..., 0])
    return out, ev
