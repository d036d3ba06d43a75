"""train.log's one line on a detection set: its counts, read from the packed index in one pass."""
import json

from PIL import Image

import up_trainer.tasks.det  # noqa: F401  (registers the data sets)
from up_trainer.data.packed_records import PackedRecords
from up_trainer.engine.builder import build_dataset
from up_trainer.tasks.data_check import summary_line


def test_summary_counts_a_packed_set_in_one_pass(tmp_path, monkeypatch):
    for name in ("a.png", "b.png", "c.png"):
        Image.new("RGB", (40, 30)).save(tmp_path / name)
    data = {
        "images": [{"id": i, "file_name": n, "width": 40, "height": 30}
                   for i, n in enumerate(("a.png", "b.png", "c.png"), 1)],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 5, 10, 10], "area": 100, "iscrowd": 0},  # border
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [5, 5, 10, 10], "area": 100, "iscrowd": 0},
            {"id": 3, "image_id": 3, "category_id": 1, "bbox": [2, 2, 30, 20], "area": 600, "iscrowd": 1},  # ignore
            {"id": 4, "image_id": 3, "category_id": 1, "bbox": [20, 10, 20, 20], "area": 400, "iscrowd": 0},  # border
        ],
        "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}],
    }
    (tmp_path / "ann.json").write_text(json.dumps(data))
    ds = build_dataset({"type": "coco", "kwargs": {"ann_file": str(tmp_path / "ann.json"), "img_dir": str(tmp_path)}},
                       "dataset.train")
    assert isinstance(ds.records, PackedRecords)
    passes = []
    plain_iter = PackedRecords.__iter__

    def counting_iter(self):
        passes.append(1)
        return plain_iter(self)

    monkeypatch.setattr(PackedRecords, "__iter__", counting_iter)
    line = summary_line(ds, "dataset.train")
    assert line.startswith("dataset.train: 3 images (1 without boxes), 3 boxes, 1 ignore regions, 2 classes, "
                           "without examples: 1 (dog), bad records skipped: 0, 2 boxes touching the image border")
    assert len(passes) == 1  # each pass unpickles every record
