"""COCO evaluator against pycocotools on hand-made cases."""
import contextlib
import io
import json

import pytest
import torch

from up_trainer.registry import EVALUATORS
from up_trainer.tasks.det.digits_det import DigitsDetection

GT = {1: ([[10, 10, 30, 30], [40, 8, 60, 40]], [1, 2]), 2: ([[5, 5, 25, 45]], [2])}
CAT_IDS = [11, 22]  # non-contiguous dataset ids: labels 1, 2 map to 11, 22


def _batch(gt, dets, index0=0):
    targets, outs, ids = [], [], []
    for k, (image_id, (boxes, labels)) in enumerate(gt.items()):
        targets.append({"boxes": torch.tensor(boxes, dtype=torch.float32), "labels": torch.tensor(labels),
                        "image_id": image_id, "orig_size": torch.tensor([64, 64]), "img_size": torch.tensor([64, 64]),
                        "ignore_boxes": torch.zeros(0, 4)})
        b, s, lab = dets[image_id]
        outs.append({"boxes": torch.tensor(b, dtype=torch.float32).reshape(-1, 4), "scores": torch.tensor(s),
                     "labels": torch.tensor(lab, dtype=torch.int64)})
        ids.append(index0 + k)
    return ({"image": [torch.zeros(3, 64, 64)] * len(ids), "target": targets, "index": torch.tensor(ids),
             "meta": {"classes": ["a", "b"], "cat_ids": CAT_IDS}}, {"detections": outs})


def _evaluate(dets):
    ev = EVALUATORS.build({"type": "COCO"})
    ev.reset()
    ev.process(*_batch(GT, dets))
    return ev, ev.evaluate(ev.results())


def _pycocotools(dets):
    """The same case straight through pycocotools, COCO-format by hand."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    anns, res = [], []
    for image_id, (boxes, labels) in GT.items():
        for b, lab in zip(boxes, labels):
            anns.append({"id": len(anns) + 1, "image_id": image_id, "category_id": CAT_IDS[lab - 1], "iscrowd": 0,
                         "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]], "area": (b[2] - b[0]) * (b[3] - b[1])})
        for b, s, lab in zip(*dets[image_id]):
            res.append({"image_id": image_id, "category_id": CAT_IDS[lab - 1], "score": s,
                        "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]]})
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": [{"id": i, "height": 64, "width": 64} for i in GT], "annotations": anns,
                      "categories": [{"id": c} for c in CAT_IDS]}
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(res), "bbox")
        ev.evaluate(), ev.accumulate(), ev.summarize()
    return ev.stats


def test_perfect_predictions_give_ap_one():
    dets = {i: (boxes, [0.9] * len(boxes), labels) for i, (boxes, labels) in GT.items()}
    ev, m = _evaluate(dets)
    assert m["bbox.AP"] == pytest.approx(1.0) and m["bbox.AP50"] == pytest.approx(1.0)
    assert m["bbox.AP.a"] == pytest.approx(1.0) and m["bbox.AP.b"] == pytest.approx(1.0)
    assert ev.primary_metric == "bbox.AP" and "bbox.AP" in ev.metric_keys() and "bbox.AP.b" in ev.metric_keys()


def test_shifted_boxes_known_ap_and_equal_to_pycocotools():
    # Every box shifted 4 px right on a 20 px wide box: IoU 16/24 = 0.667, a match at IoU
    # thresholds .50-.65 (4 of 10) -> AP 0.4, AP50 1, AP75 0.
    def shift(boxes):
        return [[b[0] + 4, b[1], b[2] + 4, b[3]] for b in boxes]

    gt20 = {1: ([[10, 10, 30, 30]], [1]), 2: ([[5, 5, 25, 25]], [2])}
    GT.clear(), GT.update(gt20)
    try:
        dets = {i: (shift(boxes), [0.8], labels) for i, (boxes, labels) in gt20.items()}
        _, m = _evaluate(dets)
        assert m["bbox.AP"] == pytest.approx(0.4, abs=1e-6)
        assert m["bbox.AP50"] == pytest.approx(1.0) and m["bbox.AP75"] == pytest.approx(0.0)
        ref = _pycocotools(dets)
        assert [m[f"bbox.{k}"] for k in ("AP", "AP50", "AP75")] == pytest.approx(list(ref[:3]))
    finally:
        GT.clear(), GT.update({1: ([[10, 10, 30, 30], [40, 8, 60, 40]], [1, 2]), 2: ([[5, 5, 25, 45]], [2])})


def test_mixed_case_matches_pycocotools():
    # a false positive scored above a true one, a wrong class, a missed object
    dets = {1: ([[10, 10, 30, 30], [41, 9, 59, 41], [0, 0, 8, 8]], [0.7, 0.9, 0.95], [1, 2, 1]),
            2: ([[5, 5, 25, 45]], [0.6], [1])}
    _, m = _evaluate(dets)
    ref = _pycocotools(dets)
    keys = ("AP", "AP50", "AP75", "APs", "APm", "APl")
    assert [m[f"bbox.{k}"] for k in keys] == pytest.approx(list(ref[:6]), abs=1e-9)
    assert 0.0 < m["bbox.AP"] < 1.0


def test_resized_inputs_map_back_and_results_files(tmp_path):
    """Predictions in resized coordinates are scaled back; labels map to dataset ids in JSON."""
    ds = DigitsDetection(num_images=3, canvas_size=48, scale_range=[10, 16],
                         transforms=[{"type": "keep_ar_resize_max", "kwargs": {"scales": [96], "max_size": 200}}])
    batch = ds.collate_fn([ds[i] for i in range(3)])
    outs = {"detections": [{"boxes": t["boxes"], "scores": torch.ones(len(t["boxes"])), "labels": t["labels"]}
                           for t in batch["target"]]}
    ev = EVALUATORS.build({"type": "coco"})
    ev.process(batch, outs)
    results = ev.results()
    original = ds.target_of(dict(ds.records[0], **_scene(ds, 0)))["boxes"]
    assert torch.allclose(torch.tensor(results[0]["gt_boxes"]), original, atol=1e-4)
    assert batch["target"][0]["boxes"][0, 2] > 1.9 * original[0, 2]  # the boxes really were resized
    assert ev.evaluate(results)["bbox.AP"] == pytest.approx(1.0)
    ev.write_results(results, str(tmp_path / "results.jsonl"))
    coco = json.loads((tmp_path / "results.bbox.json").read_text())
    assert {d["category_id"] for d in coco} <= set(range(1, 11)) and len(coco) == sum(len(r["boxes"]) for r in results)
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 3


def _scene(ds, i):
    _, boxes, labels = ds.scene(i)
    return {"boxes": boxes, "labels": labels}


def test_no_detections_is_zero_not_a_crash():
    _, m = _evaluate({i: ([], [], []) for i in GT})
    assert m["bbox.AP"] == 0.0
