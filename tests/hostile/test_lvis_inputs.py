"""LVIS v1 files (UP's ``lvisv1`` dataset, ``LVIS`` evaluator) that parse but are not LVIS: each
is refused when the dataset is built, in one line naming the file and the element (exit 2)."""
import json
import os

import pytest

from conftest import REPO, invoke
from hostile_helpers import assert_one_line, fingerprint

DIGITS_DET = os.path.join(REPO, "configs", "det", "digits_fcos.yaml")
URL = "http://images.cocodataset.org/"


def lvis_file(tmp_path, image=None, category=None):
    from PIL import Image

    (tmp_path / "images").mkdir(exist_ok=True)
    Image.new("RGB", (16, 16), (90, 90, 90)).save(tmp_path / "images" / "a.png")
    img = {"id": 1, "coco_url": URL + "a.png", "height": 16, "width": 16, "neg_category_ids": [2],
           "not_exhaustive_category_ids": []}
    cat = {"id": 1, "name": "one", "frequency": "r"}
    data = {"images": [{**img, **(image or {})}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 8, 8], "area": 64}],
            "categories": [{**cat, **(category or {})}, {"id": 2, "name": "two", "frequency": "f"}]}
    data["images"][0] = {k: v for k, v in data["images"][0].items() if v is not None}
    path = tmp_path / "lvis.json"
    path.write_text(json.dumps(data))
    return path


def train(tmp_path, ann):
    entry = (f"{{type: lvisv1, kwargs: {{meta_file: {ann}, image_reader: {{type: fs_opencv, kwargs: "
             f"{{image_dir: {tmp_path / 'images'}}}}}}}}}")
    return invoke(["train", "--config", DIGITS_DET, "--work-dir", tmp_path / "run", "--opts",
                   f"dataset.train={entry}", "dataset.test=null", "trainer.max_epoch=1"])


@pytest.mark.parametrize("image, category, message", [
    ({"coco_url": None}, None, "images[0]: LVIS v1 names the image file by 'coco_url' (a string), got"),
    ({"coco_url": 7}, None, "images[0]: LVIS v1 names the image file by 'coco_url' (a string), got int 7"),
    ({"neg_category_ids": "2"}, None, "images[0].neg_category_ids must be a list of category ids"),
    ({"not_exhaustive_category_ids": [1.5]}, None, "images[0].not_exhaustive_category_ids must be a list"),
    ({"neg_category_ids": [9]}, None, "images[0].neg_category_ids: unknown category id 9"),
    (None, {"frequency": "rare"}, "categories[0].frequency must be one of r, c, f"),
    ({"coco_url": URL + "missing.png"}, None, "image file not found"),
])
def test_malformed_lvis_file_is_one_line(tmp_path, image, category, message):
    ann = lvis_file(tmp_path, image, category)
    result = train(tmp_path, ann)
    assert_one_line(result, f"{ann}: ", message)
    assert fingerprint(tmp_path / "run" / "checkpoints") == {}


def test_malformed_json_is_one_line(tmp_path):
    ann = tmp_path / "lvis.json"
    ann.write_text('{"images": [')
    assert_one_line(train(tmp_path, ann), f"{ann}: malformed JSON")
