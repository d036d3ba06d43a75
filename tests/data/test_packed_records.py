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
    plain = DATASETS.build(entry, "dataset.train")
    built = build_dataset(entry, "dataset.train")
    assert isinstance(built.records, PackedRecords) and isinstance(plain.records, list)
    assert list(built.records) == plain.records
    for i in range(len(plain)):
        a, b = plain[i], built[i]
        assert torch.equal(a["image"], b["image"])
        assert torch.equal(a["target"]["boxes"], b["target"]["boxes"])
        assert torch.equal(a["target"]["labels"], b["target"]["labels"])
    assert built.aspect_ratios() == plain.aspect_ratios() and built.image_classes() == plain.image_classes()
