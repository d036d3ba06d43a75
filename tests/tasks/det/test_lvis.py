"""UP's ``lvisv1`` dataset and ``LVIS`` evaluator: LVIS v1 files read as COCO plus their image
lists, and LVIS's federated AP checked against a hand computation."""
import json

import pytest
import torch

from lvis_fixtures import digits_lvis, frequency_of
from up_trainer.tasks.det.lvis_dataset import LvisV1Detection
from up_trainer.tasks.det.lvis_eval import federated_dets, lvis_metrics
from up_trainer.tasks.det.lvis_evaluator import LvisEvaluator


@pytest.fixture(scope="module")
def lvis(tmp_path_factory):
    return digits_lvis(str(tmp_path_factory.mktemp("lvis")), num_images=6, num_val_images=4)


def build(ann, img_dir, **kwargs):
    return LvisV1Detection(meta_file=ann, image_reader={"type": "fs_opencv", "kwargs": {"image_dir": img_dir}},
                           transformer=[], **kwargs)


def test_images_are_named_by_coco_url_and_keep_their_lists(lvis):
    ann, img_dir = lvis["train"]
    ds = build(ann, img_dir)
    with open(ann) as f:
        data = json.load(f)
    assert len(ds) == len([i for i in data["images"] if any(a["image_id"] == i["id"] for a in data["annotations"])])
    assert ds.records[0]["file"].endswith(data["images"][0]["coco_url"].rsplit("/", 1)[1])
    assert ds.classes == [str(d) for d in range(10)] and ds.frequencies[1] == "r" and ds.frequencies[10] == "f"
    even = next(i for i in data["images"] if i["id"] % 2 == 0)
    assert ds.image_lists[even["id"]]["neg_category_ids"] == set(even["neg_category_ids"])
    sample = ds[0]
    assert sample["image"].shape[0] == 3 and sample["target"]["boxes"].shape[1] == 4


def test_an_image_with_one_tiny_box_is_left_out_as_up_does(tmp_path, lvis):
    ann, img_dir = lvis["train"]
    with open(ann) as f:
        data = json.load(f)
    first = data["images"][0]["id"]
    data["annotations"] = [a for a in data["annotations"] if a["image_id"] != first]
    data["annotations"].append({"id": 999, "image_id": first, "category_id": 1, "bbox": [3, 3, 1, 5], "area": 5})
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data))
    assert first not in {r["image_id"] for r in build(str(path), img_dir).records}
    assert first in {r["image_id"] for r in build(str(path), img_dir, min_size=0.5).records}


def _gt(anns):
    images = sorted({a[0] for a in anns})
    return {"images": [{"id": i, "height": 100, "width": 100} for i in images],
            "annotations": [{"id": k + 1, "image_id": img, "category_id": cat, "bbox": box, "area": box[2] * box[3],
                             "iscrowd": 0} for k, (img, cat, box) in enumerate(anns)],
            "categories": [{"id": c, "name": str(c)} for c in (1, 2, 3)]}


def _det(img, cat, box, score):
    return {"image_id": img, "category_id": cat, "bbox": box, "score": score}


A, B, C, D = [10, 10, 20, 20], [50, 50, 30, 30], [5, 60, 25, 25], [60, 5, 30, 20]


def test_federated_ap_by_hand():
    """Image 1: a '1' (A), '2' verified absent; image 2: a '1' (B), '1' not exhaustive;
    image 3: a '2' (C) and a '3' (D). Detections, each exact or clearly off:
    - '1': A on 1 (0.9), an unlabelled spot on 2 (0.7: ignored, '1' is not exhaustive there),
      B on 2 (0.6) -> precision 1 at every recall: AP 1 (COCO's rules: TP, FP, TP -> 0.835);
    - '2': on image 1 (0.8: a false positive, '2' is verified absent there), C on 3 (0.5) ->
      precision 1/2 at recall 1: AP 0.5;
    - '3': on image 1 (0.95: dropped, '3' is neither present nor verified absent there), D on 3
      (0.4) -> AP 1 (0.5 if the image-1 detection counted).
    AP = mean(1, 0.5, 1); '1' rare, '2' common, '3' frequent."""
    gt = _gt([(1, 1, A), (2, 1, B), (3, 2, C), (3, 3, D)])
    lists = {1: {"neg_category_ids": {2}, "not_exhaustive_category_ids": set()},
             2: {"neg_category_ids": set(), "not_exhaustive_category_ids": {1}},
             3: {"neg_category_ids": set(), "not_exhaustive_category_ids": set()}}
    dets = [_det(1, 1, A, 0.9), _det(2, 1, [0, 0, 10, 10], 0.7), _det(2, 1, B, 0.6),
            _det(1, 2, B, 0.8), _det(3, 2, C, 0.5), _det(1, 3, B, 0.95), _det(3, 3, D, 0.4)]
    assert len(federated_dets(gt, dets, lists, 300)) == 6
    values, _ = lvis_metrics(gt, dets, lists, {1: "r", 2: "c", 3: "f"})
    assert values["AP"] == pytest.approx((1 + 0.5 + 1) / 3, abs=1e-6)
    assert (values["APr"], values["APc"], values["APf"]) == pytest.approx((1.0, 0.5, 1.0), abs=1e-6)
    assert values["AP50"] == pytest.approx(values["AP"], abs=1e-6) and values["AR300"] == pytest.approx(1.0)
    plain = {i: {"neg_category_ids": {1, 2, 3}, "not_exhaustive_category_ids": set()} for i in (1, 2, 3)}
    coco_like, _ = lvis_metrics(gt, dets, plain, {})  # every detection counts: COCO's AP
    assert coco_like["AP"] == pytest.approx(((51 + 50 * 2 / 3) / 101 + 0.5 + 0.5) / 3, abs=1e-6)
    assert coco_like["APr"] == -1.0  # no category has a frequency
    # at most max_dets per image, the best of those kept: with 1, image 1 keeps A (0.9), image 2 the
    # ignored 0.7 ('1' finds half: precision 1 up to recall 0.5, 51 of 101 points), image 3 C (0.5:
    # '2' is perfect) and '3' finds nothing
    one, _ = lvis_metrics(gt, dets, lists, {}, max_dets=1)
    assert one["AP"] == pytest.approx((51 / 101 + 1 + 0) / 3, abs=1e-6)


def test_evaluator_scores_the_ground_truth_as_perfect(lvis):
    ann, img_dir = lvis["val"]
    ds = build(ann, img_dir)
    ev = LvisEvaluator(gt_file=ann)
    batch = ds.collate_fn([ds[i] for i in range(len(ds))])
    outputs = {"detections": [{"boxes": t["boxes"], "labels": t["labels"], "scores": torch.ones(len(t["labels"]))}
                              for t in batch["target"]]}
    ev.process(batch, outputs)
    metrics = ev.evaluate(ev.results())
    assert metrics["bbox.AP"] == pytest.approx(1.0) and ev.primary_metric == "bbox.AP"
    assert set(metrics) == set(ev.metric_keys())
    present = {frequency_of(c) for t in batch["target"] for c in t["labels"].tolist()}
    assert all(metrics[f"bbox.AP{f}"] == (pytest.approx(1.0) if f in present else -1.0) for f in "rcf")
