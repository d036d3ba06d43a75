"""Annotation files that parse but lie: repeated ids, mistyped values, references to nothing,
training data without a single object. Each is refused once, when the dataset is built, in one
line naming the file and the element (exit 2), instead of training on mixed-up labels."""
import json
import os

import pytest

from conftest import REPO, invoke
from hostile_helpers import assert_one_line, fingerprint

DIGITS_DET = os.path.join(REPO, "configs", "det", "digits_fcos.yaml")


def save_png(path, width=16, height=16):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (width, height), (90, 90, 90)).save(path)


def coco_file(tmp_path, images=None, annotations=None, categories=None, drop=()):
    """A COCO file over 16x16 PNGs a.png, b.png; ``drop`` removes top-level keys."""
    for name in ("a.png", "b.png"):
        save_png(tmp_path / "images" / name)
    data = {"images": images if images is not None else [
                {"id": 1, "file_name": "a.png", "height": 16, "width": 16},
                {"id": 2, "file_name": "b.png", "height": 16, "width": 16}],
            "annotations": annotations if annotations is not None else [
                {"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 8, 8]},
                {"id": 2, "image_id": 2, "category_id": 2, "bbox": [4, 4, 6, 6]}],
            "categories": categories or [{"id": 1, "name": "one"}, {"id": 2, "name": "two"}]}
    for key in drop:
        del data[key]
    path = tmp_path / "train.json"
    path.write_text(json.dumps(data))
    return path


def train_coco(tmp_path, ann, test=None):
    test_entry = "null" if test is None else \
        f"{{type: coco, kwargs: {{ann_file: {test}, img_dir: {tmp_path / 'images'}}}}}"
    return invoke(["train", "--config", DIGITS_DET, "--work-dir", tmp_path / "run", "--opts",
                   f"dataset.train={{type: coco, kwargs: {{ann_file: {ann}, img_dir: {tmp_path / 'images'}}}}}",
                   f"dataset.test={test_entry}", "trainer.max_epoch=1"])


def build_coco(ann, tmp_path, **kwargs):
    from up_trainer.tasks.det.datasets import CocoDetection

    return CocoDetection(ann_file=str(ann), img_dir=str(tmp_path / "images"), **kwargs)


# -- COCO: ids --------------------------------------------------------------------------------------
def test_two_images_sharing_an_id_stop_the_run_before_training(tmp_path):
    """The reported case: b.png trained with a.png's boxes, exit 0, no warning."""
    ann = coco_file(tmp_path, images=[{"id": 7, "file_name": "a.png", "height": 16, "width": 16},
                                      {"id": 7, "file_name": "b.png", "height": 16, "width": 16}],
                    annotations=[{"id": 1, "image_id": 7, "category_id": 1, "bbox": [2, 2, 8, 8]}])
    result = train_coco(tmp_path, ann)
    assert_one_line(result, f"{ann}: images[1].id 7 repeats images[0].id")
    assert fingerprint(tmp_path / "run" / "checkpoints") == {}


ID_CASES = [
    ("annotation id", None, [{"id": 4, "image_id": 1, "category_id": 1, "bbox": [2, 2, 8, 8]},
                             {"id": 4, "image_id": 2, "category_id": 2, "bbox": [4, 4, 6, 6]}],
     "annotations[1].id 4 repeats annotations[0].id"),
    ("one file, two ids", [{"id": 1, "file_name": "a.png", "height": 16, "width": 16},
                           {"id": 2, "file_name": "a.png", "height": 16, "width": 16}], None,
     "images[1].file_name 'a.png' repeats images[0].file_name (the same image file under two ids)"),
    # int() used to truncate 1.5 to 1: the second image then took the first one's place
    ("fractional id", [{"id": 1, "file_name": "a.png", "height": 16, "width": 16},
                       {"id": 1.5, "file_name": "b.png", "height": 16, "width": 16}], [],
     "images[1]: 'id' must be an integer, got float 1.5"),
]


@pytest.mark.parametrize("case, images, annotations, message", ID_CASES, ids=[c[0] for c in ID_CASES])
def test_ids_must_be_unique_integers(tmp_path, case, images, annotations, message):
    from up_trainer.errors import DataError

    ann = coco_file(tmp_path, images=images, annotations=annotations)
    with pytest.raises(DataError) as exc:
        build_coco(ann, tmp_path, on_bad_record="skip" if case != "fractional id" else "error")
    assert f"{ann}: {message}" in str(exc.value)


# -- COCO: values -----------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value, message", [
    ("category_id", 1.7, "'category_id' must be an integer, got float 1.7"),  # was int(1.7): category 1
    ("bbox", ["2", "2", "8", "8"], "'bbox' must be 4 finite numbers [x, y, width, height]"),
    ("bbox", [True, 2, 8, 8], "'bbox' must be 4 finite numbers"),
    ("iscrowd", "no", "'iscrowd' must be 0, 1, true or false, got str 'no'"),  # was truthy: an ignore region
    ("area", -5, "'area' must be a finite number >= 0, got int -5"),
])
def test_mistyped_annotation_values(tmp_path, field, value, message):
    from up_trainer.errors import DataError

    ann = coco_file(tmp_path, annotations=[{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 8, 8],
                                            field: value}])
    with pytest.raises(DataError) as exc:
        build_coco(ann, tmp_path)
    assert f"{ann}: annotations[0] (id 1): malformed annotation: {message}" in str(exc.value)


def test_non_finite_area_from_json_nan(tmp_path):
    """Python's json reads NaN and Infinity literals: they reach the validator as floats."""
    from up_trainer.errors import DataError

    ann = coco_file(tmp_path)
    ann.write_text(ann.read_text().replace('"bbox": [2, 2, 8, 8]', '"bbox": [2, 2, 8, 8], "area": NaN'))
    with pytest.raises(DataError, match=r"annotations\[0\] \(id 1\): malformed annotation: 'area' must be a finite"):
        build_coco(ann, tmp_path)


# -- COCO and training: something to learn from -----------------------------------------------------
def test_coco_without_annotations_key_cannot_train(tmp_path):
    ann = coco_file(tmp_path, drop=("annotations",))
    result = train_coco(tmp_path, ann)
    assert_one_line(result, f"dataset.train: {ann} has no 'annotations' key: images only, data to predict or "
                    "evaluate on; training needs annotated images")
    assert fingerprint(tmp_path / "run" / "checkpoints") == {}


def test_coco_without_annotations_key_is_fine_as_inference_data(tmp_path):
    ds = build_coco(coco_file(tmp_path, drop=("annotations",)), tmp_path)
    assert len(ds) == 2 and ds.training_problem() is not None
    assert sum(len(r["boxes"]) for r in ds.records) == 0


def test_training_split_without_a_single_object(tmp_path):
    ann = coco_file(tmp_path, annotations=[])
    result = train_coco(tmp_path, ann)
    assert_one_line(result, f"dataset.train: {ann}: no object to train on (2 image(s), not one box")


# -- UP's detection JSONL --------------------------------------------------------------------------
def jsonl(tmp_path, *records):
    save_png(tmp_path / "x.png", 20, 10)
    save_png(tmp_path / "y.png", 20, 10)
    path = tmp_path / "meta.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def line(filename="x.png", **instance):
    return {"filename": filename, "image_height": 10, "image_width": 20,
            "instances": [{"bbox": [1, 1, 9, 9], "label": 1, **instance}]}


def build_custom(meta, tmp_path):
    from up_trainer.tasks.det.datasets import CustomDetection

    return CustomDetection(meta_file=str(meta), image_dir=str(tmp_path), classes=["a", "b"])


def test_jsonl_one_image_with_two_sets_of_labels(tmp_path):
    from up_trainer.errors import DataError

    meta = jsonl(tmp_path, line(), line("y.png"), line(label=2))
    with pytest.raises(DataError, match=rf"{meta}:3: filename 'x.png' repeats line 1 with other sizes or instances"):
        build_custom(meta, tmp_path)
    same = jsonl(tmp_path, line(), line(), line("y.png"))  # a repeated line: oversampling, kept
    assert len(build_custom(same, tmp_path)) == 3


@pytest.mark.parametrize("instance, message", [
    ({"is_ignored": "false"}, "instances[0]: 'is_ignored' must be 0, 1, true or false, got str 'false'"),
    ({"label": 1.9}, "instances[0]: unknown label 1.9 (labels are 1..2)"),  # was int(1.9): label 1
    ({"label": True}, "instances[0]: unknown label True"),
])
def test_jsonl_mistyped_instance_values(tmp_path, instance, message):
    from up_trainer.errors import DataError

    meta = jsonl(tmp_path, line(**instance))
    with pytest.raises(DataError) as exc:
        build_custom(meta, tmp_path)
    assert f"{meta}:1: {message}" in str(exc.value)


# -- classification lists --------------------------------------------------------------------------
def test_cls_list_with_one_image_under_two_labels(tmp_path):
    from up_trainer.errors import DataError
    from up_trainer.tasks.cls.meta_dataset import ClsMetaDataset

    save_png(tmp_path / "a.png", 8, 8)
    meta = tmp_path / "train.txt"
    meta.write_text("a.png 0\na.png 0\na.png 3\n")
    with pytest.raises(DataError, match=rf"{meta}:3: {tmp_path / 'a.png'} has label 3 here and 0 on line 1"):
        ClsMetaDataset(meta_file=str(meta), image_dir=str(tmp_path))


def test_cls_unlabeled_list_as_train_is_refused_at_build(tmp_path):
    from up_trainer.data.validation import require_training_data
    from up_trainer.errors import DataError
    from up_trainer.tasks.cls.meta_dataset import ClsMetaDataset

    save_png(tmp_path / "a.png", 8, 8)
    meta = tmp_path / "infer.txt"
    meta.write_text("a.png\n")
    ds = ClsMetaDataset(meta_file=str(meta), image_dir=str(tmp_path), meta_type="inference_only", num_classes=2)
    with pytest.raises(DataError, match=rf"dataset.train: {meta}: images without labels"):
        require_training_data(ds, "dataset.train")
