"""Packed records: the index a training data set keeps, one byte buffer instead of Python
objects, read back exactly, read-only, and what build_dataset hands the loaders."""
import pickle

import pytest
import torch

from format_fixtures import digits_coco
from up_trainer.data.packed_records import PackedRecords
from up_trainer.engine.builder import build_dataset
from up_trainer.registry import DATASETS

RECORDS = [{"image_id": i, "file": f"img/{i}.jpg", "boxes": [[0.5, 1.0, 3.25, 4.0]] * i, "labels": [1] * i,
            "ignore": [], "source": ("a.json", i), "height": 10 + i, "width": 20.5} for i in range(7)]


def test_reads_back_every_record_exactly_by_index_negative_index_slice_and_iteration():
    packed = PackedRecords(RECORDS)
    assert len(packed) == 7
    assert [packed[i] for i in range(7)] == RECORDS
    assert packed[-1] == RECORDS[-1] and packed[-7] == RECORDS[0]
    assert packed[2:5] == RECORDS[2:5] and packed[::3] == RECORDS[::3]
    assert list(packed) == RECORDS
    assert packed[torch.tensor(3)] == RECORDS[3]  # sampler indices may be 0-d tensors


@pytest.mark.parametrize("index", [7, -8, 100])
def test_out_of_range_index_raises_index_error(index):
    with pytest.raises(IndexError, match="out of range for 7 records"):
        PackedRecords(RECORDS)[index]


def test_a_read_record_is_a_copy_the_store_never_changes():
    packed = PackedRecords(RECORDS)
    first = packed[1]
    first["boxes"].append([9, 9, 9, 9])
    first["labels"] = []
    assert packed[1] == RECORDS[1]


def test_empty_and_the_store_is_two_arrays_not_python_objects_per_record():
    assert len(PackedRecords([])) == 0 and list(PackedRecords([])) == []
    packed = PackedRecords(RECORDS)
    assert set(vars(packed)) == {"_offsets", "_buffer"}
    assert packed.nbytes == sum(len(pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)) for r in RECORDS) + 8 * 8


def test_build_dataset_packs_the_records_and_gives_the_same_samples(tmp_path):
    _, img_dir, ann = digits_coco(str(tmp_path))["train"]
    entry = {"type": "coco", "kwargs": {"ann_file": ann, "img_dir": img_dir}}
    assert isinstance(DATASETS.build(entry, "dataset.train").records, list)  # tools that edit records keep lists
    built, plain = build_dataset(entry, "dataset.train"), build_dataset(entry, "dataset.train")
    plain.records = list(plain.records)
    assert isinstance(built.records, PackedRecords)
    assert list(built.records) == plain.records
    for i in range(len(plain)):
        a, b = plain[i], built[i]
        assert torch.equal(a["image"], b["image"])
        assert torch.equal(a["target"]["boxes"], b["target"]["boxes"])
        assert torch.equal(a["target"]["labels"], b["target"]["labels"])
    assert built.aspect_ratios() == plain.aspect_ratios() and built.image_classes() == plain.image_classes()


def test_coco_checked_at_once_gives_the_records_of_the_per_annotation_pass(tmp_path, monkeypatch):
    """The whole-array pass (coco_fast) and the per-annotation pass build identical records,
    crowd regions, clipped edge boxes, given and missing areas included."""
    from up_trainer.data.validation import coco as coco_validation

    data, img_dir, ann = digits_coco(str(tmp_path))["train"]
    anns = data["annotations"]
    anns[0]["iscrowd"] = 1
    anns[1]["bbox"][0] = -0.5  # sticks out by rounding: clipped
    anns[2].pop("area", None)
    anns[3]["area"] = 0
    anns[4]["ignore"] = True
    path_of = lambda name: f"{img_dir}/{name}"  # noqa: E731
    real, taken = coco_validation.fast_annotations, []
    monkeypatch.setattr(coco_validation, "fast_annotations", lambda *a: taken.append(real(*a)) or taken[-1])
    fast = coco_validation.coco_records(data, ann, _raise, path_of)
    assert taken == [True]  # the whole-array pass took the file
    monkeypatch.setattr(coco_validation, "fast_annotations", lambda *a: False)
    slow = coco_validation.coco_records(data, ann, _raise, path_of)
    assert fast.records == slow.records and any(r["ignore"] for r in fast.records)


@pytest.mark.parametrize("change", [
    lambda a: a.update(bbox=[1, 2, "3", 4]), lambda a: a.update(bbox=[1, 2, 3]), lambda a: a.update(iscrowd=2),
    lambda a: a.update(category_id=999), lambda a: a.update(image_id=True), lambda a: a.update(area=float("nan")),
    lambda a: a.update(bbox=[1, 2, 0, 4]), lambda a: a.update(bbox=[40, 2, 30, 4]), lambda a: a.pop("bbox")])
def test_a_bad_annotation_leaves_the_file_to_the_pass_that_names_it(tmp_path, change):
    from up_trainer.data.validation import coco as coco_validation
    from up_trainer.errors import DataError

    data, img_dir, ann = digits_coco(str(tmp_path))["train"]
    change(data["annotations"][2])
    with pytest.raises(DataError, match=r"annotations\[2\]"):
        coco_validation.coco_records(data, ann, _raise, lambda name: f"{img_dir}/{name}")


def _raise(message):
    from up_trainer.errors import DataError

    raise DataError(message)


def test_relabelled_packed_records_keep_the_new_labels(tmp_path):
    """The run's label map rewrites a built (packed) set's labels: the rewrite must land."""
    _, img_dir, ann = digits_coco(str(tmp_path))["train"]
    built = build_dataset({"type": "coco", "kwargs": {"ann_file": ann, "img_dir": img_dir}}, "dataset.train")
    n = built.num_classes
    mapping = {i: n - 1 - i for i in range(n)}  # reversed
    before = [r["labels"] for r in built.records]
    built.relabel(mapping, list(reversed(built.classes)))
    assert isinstance(built.records, PackedRecords)
    assert [r["labels"] for r in built.records] == [[n - label + 1 for label in labels] for labels in before]
    assert built[0]["target"]["labels"].tolist() == [n - label + 1 for label in before[0]]
