"""Detection datasets: digits_det determinism, COCO export round trip, custom JSONL, bad data."""
import json
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from up_trainer.cli import main
from up_trainer.errors import ConfigError, DataError
from up_trainer.registry import DATASETS
from up_trainer.tasks.det.datasets import CocoDetection, CustomDetection
from up_trainer.tasks.det.digits_det import DigitsDetection
from up_trainer.tasks.det.export import export_digits_coco

SCENE = dict(canvas_size=48, digits_per_image=[1, 3], scale_range=[10, 18])


def test_digits_det_sample_contract_and_determinism():
    a = DigitsDetection(split="train", num_images=6, seed=3, **SCENE)
    b = DigitsDetection(split="train", num_images=6, seed=3, **SCENE)
    v = DigitsDetection(split="val", num_images=6, seed=3, **SCENE)
    s = a[2]
    t = s["target"]
    assert s["image"].shape == (3, 48, 48) and s["image"].dtype == torch.float32 and s["index"] == 2
    assert t["boxes"].dtype == torch.float32 and t["boxes"].shape[1] == 4 and t["labels"].dtype == torch.int64
    assert len(t["boxes"]) == len(t["labels"]) >= 1
    assert ((t["labels"] >= 1) & (t["labels"] <= 10)).all()
    assert (t["boxes"][:, 2] > t["boxes"][:, 0]).all() and (t["boxes"] >= 0).all() and (t["boxes"] <= 48).all()
    assert t["image_id"] == 3 and t["orig_size"].tolist() == [48, 48]
    assert torch.equal(s["image"], b[2]["image"]) and torch.equal(t["boxes"], b[2]["target"]["boxes"])
    assert not torch.equal(s["image"], v[2]["image"])
    assert a.num_classes == 10 and a.classes[0] == "0" and a.default_evaluator == {"type": "COCO"}
    # the ink inside every box: boxes are tight around the drawn digits
    for box in t["boxes"]:
        x1, y1, x2, y2 = box.round().int().tolist()
        assert s["image"][0, y1:y2, x1:x2].max() > 0.5
    batch = a.collate_fn([a[0], a[1]])
    assert isinstance(batch["image"], list) and isinstance(batch["target"], list)
    assert batch["index"].tolist() == [0, 1] and batch["meta"]["cat_ids"] == list(range(1, 11))


def test_train_and_val_use_disjoint_handwriting():
    tr, va = DigitsDetection(split="train", num_images=1), DigitsDetection(split="val", num_images=1)
    assert set(tr.pool.tolist()).isdisjoint(va.pool.tolist()) and len(va.pool) > 300


def test_bad_digits_kwargs_are_config_errors():
    with pytest.raises(ConfigError, match="scale_range"):
        DigitsDetection(canvas_size=32, scale_range=[10, 40])
    with pytest.raises(ConfigError, match="split"):
        DigitsDetection(split="test")


def test_export_round_trip_gives_identical_targets(tmp_path):
    written = export_digits_coco(str(tmp_path), num_images=5, num_val_images=3, seed=7, **SCENE)
    assert set(written) == {"train", "val"}
    for split, (ann, img_dir) in written.items():
        gen = DigitsDetection(split=split, num_images=5 if split == "train" else 3, seed=7, **SCENE)
        coco = CocoDetection(ann_file=ann, img_dir=img_dir)
        assert len(coco) == len(gen) and coco.classes == gen.classes
        for i in range(len(gen)):
            g, c = gen[i], coco[i]
            for key in ("boxes", "labels", "area", "orig_size"):
                assert torch.equal(g["target"][key], c["target"][key]), (split, i, key)
            assert g["target"]["image_id"] == c["target"]["image_id"]
            assert c["image"].dtype == torch.uint8  # decoded images stay 8-bit until the model input
            assert (g["image"] - c["image"].float() / 255).abs().max() <= 0.5 / 255 + 1e-6  # PNG rounding


def test_data_command_writes_coco(tmp_path):
    res = CliRunner().invoke(main, ["data", "digits-det", "--out", str(tmp_path), "--num-images", "3",
                                    "--num-val-images", "2", "--canvas-size", "48"])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "annotations" / "instances_val.json").read_text())
    assert len(data["images"]) == 2 and len(data["categories"]) == 10
    assert sorted(os.listdir(tmp_path / "images" / "train")) == ["000001.png", "000002.png", "000003.png"]


def _coco_file(tmp_path, annotations, images=None, categories=None):
    from PIL import Image

    img_dir = tmp_path / "imgs"
    img_dir.mkdir(exist_ok=True)
    for name in ("a.png", "b.png"):  # one file per image entry: a file under two ids is refused
        Image.fromarray(np.zeros((40, 50, 3), np.uint8)).save(img_dir / name)
    data = {"images": images or [{"id": 1, "file_name": "a.png", "height": 40, "width": 50}],
            "annotations": annotations, "categories": categories or [{"id": 3, "name": "cat"}, {"id": 7, "name": "dog"}]}
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(data))
    return str(path), str(img_dir)


def test_coco_category_map_crowd_and_empty_images(tmp_path):
    ann, img_dir = _coco_file(tmp_path, [
        {"id": 1, "image_id": 1, "category_id": 7, "bbox": [1, 2, 10, 20], "area": 150, "iscrowd": 0},
        {"id": 2, "image_id": 1, "category_id": 3, "bbox": [5, 5, 5, 5], "iscrowd": 1}],
        images=[{"id": 1, "file_name": "a.png", "height": 40, "width": 50},
                {"id": 2, "file_name": "b.png", "height": 40, "width": 50}])
    ds = DATASETS.build({"type": "coco", "kwargs": {"ann_file": ann, "img_dir": img_dir}})
    t = ds[0]["target"]
    assert ds.cat_ids == [3, 7] and ds.classes == ["cat", "dog"]
    assert t["labels"].tolist() == [2] and t["boxes"].tolist() == [[1, 2, 11, 22]] and t["area"].tolist() == [150]
    assert t["ignore_boxes"].tolist() == [[5, 5, 10, 10]]
    assert len(ds) == 2 and len(ds[1]["target"]["boxes"]) == 0  # kept for evaluation
    assert len(CocoDetection(ann_file=ann, img_dir=img_dir, skip_empty=True)) == 1


@pytest.mark.parametrize("ann, message", [
    ({"id": 9, "image_id": 1, "category_id": 3, "bbox": [40, 30, 20, 20]}, r"annotations\[0\] \(id 9\).*outside"),
    ({"id": 9, "image_id": 1, "category_id": 3, "bbox": [4, 3, 0, 20]}, r"annotations\[0\] \(id 9\).*non-positive"),
    ({"id": 9, "image_id": 1, "category_id": 5, "bbox": [4, 3, 5, 5]}, r"annotations\[0\] \(id 9\).*unknown category_id 5"),
    ({"id": 9, "image_id": 1, "bbox": [4, 3, 5, 5]}, r"annotations\[0\] \(id 9\).*malformed"),
])
def test_coco_bad_records(tmp_path, ann, message):
    path, img_dir = _coco_file(tmp_path, [ann, {"id": 10, "image_id": 1, "category_id": 3, "bbox": [1, 1, 5, 5]}])
    with pytest.raises(DataError, match=message) as exc:
        CocoDetection(ann_file=path, img_dir=img_dir)
    assert path in str(exc.value)
    # skip: the image with the bad annotation is dropped, so nothing usable is left
    with pytest.raises(DataError, match="no usable images after|skipping 1 bad"):
        CocoDetection(ann_file=path, img_dir=img_dir, on_bad_record="skip")


def test_coco_missing_image_empty_and_malformed_files(tmp_path):
    path, img_dir = _coco_file(tmp_path, [], images=[
        {"id": 1, "file_name": "a.png", "height": 40, "width": 50},
        {"id": 2, "file_name": "gone.png", "height": 40, "width": 50}])
    with pytest.raises(DataError, match=r"image id 2 \(gone.png\): image file not found"):
        CocoDetection(ann_file=path, img_dir=img_dir)
    ds = CocoDetection(ann_file=path, img_dir=img_dir, on_bad_record="skip")
    assert len(ds) == 1 and len(ds.skipped) == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [')
    with pytest.raises(DataError, match="bad.json: malformed JSON"):
        CocoDetection(ann_file=str(bad), img_dir=img_dir)
    bad.write_text("{}")
    with pytest.raises(DataError, match="empty"):
        CocoDetection(ann_file=str(bad), img_dir=img_dir)
    with pytest.raises(DataError, match="not found"):
        CocoDetection(ann_file=str(tmp_path / "nope.json"), img_dir=img_dir)
    with pytest.raises(ConfigError, match="on_bad_record"):
        CocoDetection(ann_file=path, img_dir=img_dir, on_bad_record="ignore")


def _custom(tmp_path, lines):
    from PIL import Image

    for name in ("x.png", "x2.png"):
        Image.fromarray(np.full((30, 40, 3), 255, np.uint8)).save(tmp_path / name)
    meta = tmp_path / "meta.jsonl"
    meta.write_text("\n".join(lines) + "\n")
    return str(meta)


def test_custom_jsonl(tmp_path):
    rec = {"filename": "x.png", "image_height": 30, "image_width": 40, "instances": [
        {"bbox": [1, 2, 11, 12], "label": 2}, {"bbox": [20, 5, 30, 25], "label": 1, "is_ignored": True}]}
    # a file listed twice with other instances is refused: the second line is another image
    meta = _custom(tmp_path, [json.dumps(rec), json.dumps(dict(rec, filename="x2.png", instances=[]))])
    ds = CustomDetection(meta_file=meta, image_dir=str(tmp_path), classes=["a", "b"],
                         transforms=[{"type": "keep_ar_resize_max", "kwargs": {"scales": [60], "max_size": 100}}])
    s = ds[0]
    assert s["image"].shape == (3, 60, 80)
    assert s["target"]["boxes"].tolist() == [[2, 4, 22, 24]] and s["target"]["labels"].tolist() == [2]
    assert s["target"]["ignore_boxes"].tolist() == [[40, 10, 60, 50]]
    assert s["target"]["img_size"].tolist() == [60, 80] and s["target"]["orig_size"].tolist() == [30, 40]
    assert len(ds) == 2 and ds.num_classes == 2
    assert CustomDetection(meta_file=meta, image_dir=str(tmp_path)).classes == ["1", "2"]


def test_custom_bad_records(tmp_path):
    good = {"filename": "x.png", "image_height": 30, "image_width": 40, "instances": [{"bbox": [1, 2, 11, 12], "label": 1}]}
    meta = _custom(tmp_path, [json.dumps(good), "{not json", json.dumps(dict(good, filename="y.png")),
                              json.dumps(dict(good, instances=[{"bbox": [1, 2, 11, 12], "label": 5}]))])
    with pytest.raises(DataError, match=r"meta.jsonl:2: malformed record"):
        CustomDetection(meta_file=meta, image_dir=str(tmp_path), classes=["a", "b"])
    ds = CustomDetection(meta_file=meta, image_dir=str(tmp_path), classes=["a", "b"], on_bad_record="skip")
    assert len(ds) == 1 and len(ds.skipped) == 3
    assert "meta.jsonl:3 (y.png): image file not found" in ds.skipped[1]
    assert "meta.jsonl:4: instances[0]: unknown label 5" in ds.skipped[2]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.jsonl: no usable records"):
        CustomDetection(meta_file=str(empty), image_dir=str(tmp_path))
