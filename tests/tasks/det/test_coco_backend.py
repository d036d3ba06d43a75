"""faster-coco-eval against pycocotools: every summary value equal (to 1e-12) on the same cases."""
import copy

import numpy as np
import pytest
import torch

from up_trainer.errors import ConfigError
from up_trainer.registry import DATASETS, EVALUATORS
from up_trainer.tasks.det.coco_backend import resolve_backend, run_bbox_eval

pytest.importorskip("faster_coco_eval")


def _scene_case(n_images=40, seed=0):
    """Digit scenes with jittered true boxes, false positives, wrong classes and ignore regions."""
    ds = DATASETS.build({"type": "digits_det", "kwargs": {"split": "val", "num_images": n_images,
                                                          "canvas_size": 64}})
    g = torch.Generator().manual_seed(seed)
    batch = ds.collate_fn([ds[i] for i in range(n_images)])
    dets = []
    for k, t in enumerate(batch["target"]):
        boxes = t["boxes"] + torch.randn(t["boxes"].shape, generator=g) * 2.0
        fp = torch.rand(2, 2, generator=g) * 40
        fp = torch.cat([fp, fp + 6 + torch.rand(2, 2, generator=g) * 12], dim=1)
        labels = torch.cat([t["labels"], torch.randint(1, 11, (2,), generator=g)])
        dets.append({"boxes": torch.cat([boxes, fp]), "labels": labels, "scores": torch.rand(len(labels), generator=g)})
        if k % 7 == 0:  # a crowd region: detections inside are neither right nor wrong
            t["ignore_boxes"] = torch.tensor([[0.0, 0.0, 20.0, 20.0]])
    ev = EVALUATORS.build({"type": "COCO", "kwargs": {"backend": "pycocotools"}})
    ev.process(batch, {"detections": dets})
    return ev.to_coco(ev.results())


# At max_dets 100 only: pycocotools' summarize looks AP@[.5:.95] up at a hard-coded 100
# detections and reports -1 for any other max_dets, where faster-coco-eval reports the AP.
@pytest.mark.parametrize("max_dets", [100])
def test_every_summary_value_equals_pycocotools(max_dets):
    gt, dets = _scene_case()
    ref, _ = run_bbox_eval(copy.deepcopy(gt), copy.deepcopy(dets), "pycocotools", max_dets)
    fast, _ = run_bbox_eval(copy.deepcopy(gt), copy.deepcopy(dets), "faster_coco_eval", max_dets)
    assert len(ref.stats) == len(fast.stats) == 12
    # Equal to the last bits: only the summation order of a mean may differ (one ulp seen).
    np.testing.assert_allclose(fast.stats, ref.stats, rtol=0, atol=1e-12)
    assert [round(v, 12) for v in fast.stats] == [round(v, 12) for v in ref.stats]
    assert 0.05 < ref.stats[0] < 0.95  # a case where AP measures something
    np.testing.assert_allclose(fast.eval["precision"], ref.eval["precision"], rtol=0, atol=1e-12)


def test_the_evaluator_gives_identical_metrics_with_either_backend():
    from test_det_evaluator import GT, _batch

    dets = {1: ([[10, 10, 30, 30], [41, 9, 59, 41], [0, 0, 8, 8]], [0.7, 0.9, 0.95], [1, 2, 1]),
            2: ([[5, 5, 25, 45]], [0.6], [1])}
    out = {}
    for backend in ("pycocotools", "faster_coco_eval"):
        ev = EVALUATORS.build({"type": "COCO", "kwargs": {"backend": backend}})
        ev.process(*_batch(GT, dets))
        out[backend] = ev.evaluate(ev.results())
    assert out["pycocotools"].keys() == out["faster_coco_eval"].keys()
    for key, value in out["pycocotools"].items():
        assert out["faster_coco_eval"][key] == pytest.approx(value, abs=1e-12), key
    assert resolve_backend("auto") == "faster_coco_eval"


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="backend"):
        EVALUATORS.build({"type": "COCO", "kwargs": {"backend": "fast"}})


@pytest.mark.parametrize("backend", ["pycocotools", "faster_coco_eval"])
def test_results_built_for_boxes_evaluate_as_load_res_does(backend):
    """box_results (no polygon per box) gives every summary value and the whole precision array
    of the library's own loadRes."""
    from up_trainer.tasks.det import coco_backend

    gt, dets = _scene_case(seed=3)
    ours, _ = run_bbox_eval(copy.deepcopy(gt), copy.deepcopy(dets), backend)
    coco_cls, eval_cls = coco_backend._api(backend)
    ref_gt = coco_cls()
    ref_gt.dataset = copy.deepcopy(gt)
    ref_gt.createIndex()
    ref = eval_cls(ref_gt, ref_gt.loadRes(copy.deepcopy(dets)), "bbox")
    ref.evaluate()
    ref.accumulate()
    ref.summarize()
    assert np.array_equal(np.asarray(ours.stats), np.asarray(ref.stats))
    assert np.array_equal(ours.eval["precision"], ref.eval["precision"])
