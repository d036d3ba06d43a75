"""Classification datasets on real data: digits (bundled with scikit-learn), tiny PNG folders."""
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from up_trainer.errors import ConfigError, DataError
from up_trainer.registry import DATASETS
from up_trainer.tasks.cls.datasets import DigitsDataset, ImageFolderDataset, _load_digits, stratified_split
from up_trainer.tasks.cls.meta_dataset import ClsMetaDataset

AFFINE = [{"type": "RandomAffine", "kwargs": {"degrees": 15, "translate": [0.2, 0.2]}}]


# -- digits -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits_labels():
    return _load_digits()[1]


def test_digits_split_sizes_disjoint_and_complete():
    train, test = DigitsDataset(split="train"), DigitsDataset(split="test")
    assert len(train) == 1438 and len(test) == 359
    assert not set(train.source_indices) & set(test.source_indices)
    assert sorted(train.source_indices + test.source_indices) == list(range(1797))
    assert len(DigitsDataset(split="all")) == 1797


def test_digits_split_is_pinned():
    # Same split on every machine: a seeded numpy RandomState, stable across versions.
    test = DigitsDataset(split="test")
    assert test.source_indices[:12] == [3, 7, 13, 19, 36, 38, 43, 48, 53, 55, 60, 62]
    assert sum(test.source_indices) == 311827
    assert DigitsDataset(split="test", split_seed=1).source_indices != test.source_indices


def test_digits_split_is_stratified(digits_labels):
    train, test = stratified_split(digits_labels, 0.2, 0)
    for c in range(10):
        n = int((digits_labels == c).sum())
        assert int((digits_labels[test] == c).sum()) == round(n * 0.2)
        assert int((digits_labels[train] == c).sum()) == n - round(n * 0.2)
    again = stratified_split(digits_labels, 0.2, 0)
    assert np.array_equal(train, again[0]) and np.array_equal(test, again[1])


def test_digits_sample_format(digits_labels):
    ds = DigitsDataset(split="test", subset=5)
    assert len(ds) == 5 and ds.num_classes == 10 and ds.classes == [str(i) for i in range(10)]
    s = ds[3]
    assert set(s) == {"image", "label", "index"}
    assert s["image"].dtype == torch.float32 and s["image"].shape == (1, 8, 8)
    assert 0.0 <= s["image"].min() and s["image"].max() <= 1.0 and s["image"].max() > 0.5
    assert s["label"].dtype == torch.int64 and s["label"].shape == ()
    assert s["label"].item() == digits_labels[ds.source_indices[3]] and s["index"] == 3


def test_digits_resize():
    assert DigitsDataset(split="test", subset=2, size=16)[0]["image"].shape == (1, 16, 16)


def test_digits_transforms_use_torch_rng():
    ds = DigitsDataset(split="train", subset=4, transforms=AFFINE)
    plain = DigitsDataset(split="train", subset=4)
    torch.manual_seed(5)
    a = ds[1]["image"]
    torch.manual_seed(5)
    b = ds[1]["image"]
    torch.manual_seed(6)
    c = ds[1]["image"]
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a, plain[1]["image"])
    assert ds.images[1].equal(plain.images[1])  # the stored image is never modified in place


def test_digits_accepts_up_transformer_key():
    ds = DATASETS.build({"type": "digits", "kwargs": {"subset": 2, "transformer": AFFINE}}, "dataset.train")
    assert ds.transform is not None


@pytest.mark.parametrize("kwargs,path,text", [
    ({"split": "tran"}, "dataset.train.kwargs.split", "did you mean 'train'"),
    ({"test_ratio": 1.5}, "dataset.train.kwargs.test_ratio", "between 0 and 1"),
    ({"subset": 0}, "dataset.train.kwargs.subset", ">= 1"),
    ({"transforms": AFFINE, "transformer": AFFINE}, "dataset.train.kwargs.transformer", "not both"),
    ({"transforms": [{"type": "RandomAfine"}]}, "dataset.train.kwargs.transforms[0].type",
     "did you mean 'RandomAffine'"),
    ({"transforms": [{"type": "RandomAffine", "kwargs": {"degree": 3}}]},
     "dataset.train.kwargs.transforms[0].kwargs.degree", "did you mean 'degrees'"),
    ({"size": "8"}, "dataset.train.kwargs.size", "expected int"),
])
def test_digits_config_errors(kwargs, path, text):
    with pytest.raises(ConfigError) as exc:
        DATASETS.build({"type": "digits", "kwargs": kwargs}, "dataset.train")
    assert exc.value.path == path
    assert text in str(exc.value)


def test_digits_collates_into_batches():
    ds = DigitsDataset(split="test", subset=10)
    batch = next(iter(DataLoader(ds, batch_size=4)))
    assert batch["image"].shape == (4, 1, 8, 8) and batch["label"].dtype == torch.int64
    assert batch["index"].tolist() == [0, 1, 2, 3]


# -- image files ----------------------------------------------------------------------------------
def write_png(path, value, mode="RGB", size=(6, 5)):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    color = (value, 255 - value, 7) if mode == "RGB" else value
    Image.new(mode, size, color).save(path)


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "imgs"
    write_png(str(root / "cat" / "a.png"), 10)
    write_png(str(root / "cat" / "sub" / "b.png"), 20)
    write_png(str(root / "dog" / "c.png"), 200, mode="L")
    (root / "dog" / "notes.txt").write_text("not an image")
    return root


def test_image_folder_classes_and_samples(folder):
    ds = ImageFolderDataset(root=str(folder))
    assert ds.classes == ["cat", "dog"] and ds.num_classes == 2 and len(ds) == 3
    labels = [ds[i]["label"].item() for i in range(3)]
    assert labels == [0, 0, 1]
    img = ds[0]["image"]
    assert img.shape == (3, 5, 6) and img.dtype == torch.uint8  # decoded pixels, converted at the model input
    assert img[:, 0, 0].tolist() == [10, 245, 7]
    assert torch.allclose(ds.model_input(img)[:, 0, 0], torch.tensor([10, 245, 7]) / 255.0)
    gray = ImageFolderDataset(root=str(folder), color_mode="L")
    assert gray[2]["image"].shape == (1, 5, 6)
    assert gray[2]["image"][0, 0, 0].item() == 200
    assert gray.model_input(gray[2]["image"])[0, 0, 0].item() == pytest.approx(200 / 255)


def test_image_folder_built_for_a_run_packs_its_rows_and_relabels_them(folder):
    """Built for a run, the folder's (path, label) rows sit in one packed buffer that loader
    workers share; samples, the image cache's file list and the run's label map read them."""
    from up_trainer.data.label_map import one_label_map
    from up_trainer.data.packed_records import PackedRecords
    from up_trainer.engine.builder import build_dataset

    entry = {"type": "image_folder", "kwargs": {"root": str(folder)}}
    plain, built = DATASETS.build(entry, "d"), build_dataset(entry, "dataset.train")
    assert isinstance(plain.records, list) and isinstance(built.records, PackedRecords)
    assert list(built.records) == plain.records == list(built.samples) and len(built) == 3
    assert built.image_files() == plain.image_files()
    for i in range(3):
        assert torch.equal(built[i]["image"], plain[i]["image"]) and built[i]["label"] == plain[i]["label"]
    write_png(str(folder.parent / "train" / "bird" / "x.png"), 1)  # the run's classes: bird, cat, dog
    write_png(str(folder.parent / "train" / "cat" / "x.png"), 2)
    write_png(str(folder.parent / "train" / "dog" / "x.png"), 3)
    train = ImageFolderDataset(root=str(folder.parent / "train"))
    assert one_label_map(train, [("dataset.test", built)]) == ["bird", "cat", "dog"]
    assert isinstance(built.records, PackedRecords) and [label for _, label in built.samples] == [1, 1, 2]
    assert [built[i]["label"].item() for i in range(3)] == [1, 1, 2]


def test_image_folder_errors(folder, tmp_path):
    with pytest.raises(DataError, match="not a directory"):
        ImageFolderDataset(root=str(tmp_path / "missing"))
    os.makedirs(folder / "empty")
    with pytest.raises(DataError, match="empty has no images"):
        ImageFolderDataset(root=str(folder))
    os.rmdir(folder / "empty")
    (folder / "dog" / "broken.png").write_bytes(b"not a png")
    ds = ImageFolderDataset(root=str(folder))
    broken = [i for i, (path, _) in enumerate(ds.samples) if path.endswith("broken.png")][0]
    with pytest.raises(DataError, match="broken.png"):
        ds[broken]
    with pytest.raises(ConfigError) as exc:
        DATASETS.build({"type": "image_folder", "kwargs": {"root": str(folder), "color_mode": "rgb"}}, "d")
    assert exc.value.path == "d.kwargs.color_mode" and "did you mean 'RGB'" in str(exc.value)


@pytest.fixture
def image_dir(tmp_path):
    d = tmp_path / "images"
    write_png(str(d / "a.png"), 1)
    write_png(str(d / "b c.png"), 2)  # a space in the name: labels split from the right
    write_png(str(d / "sub" / "d.png"), 3)
    return d


def write_meta(tmp_path, text, name="meta.txt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_cls_text_meta(tmp_path, image_dir):
    meta = write_meta(tmp_path, "a.png 0\n\nb c.png 2\nsub/d.png 1\n")
    ds = ClsMetaDataset(meta_file=meta, image_dir=str(image_dir))
    assert len(ds) == 3 and ds.num_classes == 3 and ds.classes == ["0", "1", "2"]
    assert [ds[i]["label"].item() for i in range(3)] == [0, 2, 1]
    assert ds[1]["image"].shape == (3, 5, 6)
    batch = next(iter(DataLoader(ds, batch_size=3)))
    assert batch["image"].shape == (3, 3, 5, 6)


def test_cls_jsonl_meta_and_up_image_reader(tmp_path, image_dir):
    lines = [{"filename": "a.png", "label": 1}, {"filename": "sub/d.png", "label": 0}]
    meta = write_meta(tmp_path, "\n".join(json.dumps(x) for x in lines), name="meta.jsonl")
    ds = DATASETS.build({"type": "cls", "kwargs": {
        "meta_file": meta, "classes": ["no", "yes"],
        "image_reader": {"type": "fs_pillow", "kwargs": {"image_dir": str(image_dir), "color_mode": "L"}}}}, "d")
    assert ds.classes == ["no", "yes"] and ds.num_classes == 2
    assert ds[0]["image"].shape == (1, 5, 6) and ds[0]["label"].item() == 1
    # JSON detected by content too, whatever the extension
    meta_txt = write_meta(tmp_path, json.dumps(lines[0]) + "\n", name="list.txt")
    assert ClsMetaDataset(meta_file=meta_txt, image_dir=str(image_dir))[0]["label"].item() == 1


@pytest.mark.parametrize("text,name,match", [
    ("a.png 0\nmissing.png 1\n", "meta.txt", r"meta.txt:2: image not found: .*missing.png"),
    ("a.png 0\nb c.png x\n", "meta.txt", r"meta.txt:2: label 'x' is not an integer"),
    ("a.png 0\n\nnolabel\n", "meta.txt", r"meta.txt:3: expected 'relative/path label'"),
    ("a.png -1\n", "meta.txt", r"meta.txt:1: label -1 is negative"),
    ('{"filename": "a.png", "label": 0}\n{"filename": "a.png", "label": 1\n', "m.jsonl",
     r"m.jsonl:2: malformed JSON"),
    ('{"filename": "a.png", "label": 0}\n{"file": "a.png", "label": 1}\n', "m.jsonl",
     r"m.jsonl:2: expected a JSON object with 'filename' and 'label'"),
    ('{"filename": "a.png", "label": {"a": 1}}\n', "m.jsonl", r"m.jsonl:1: label must be an integer"),
    ('{"filename": "a.png", "label": [0, [1]]}\n', "m.jsonl", r"m.jsonl:1: label entry 1: label must be an integer"),
    ("\n  \n", "meta.txt", r"meta.txt is empty"),
])
def test_cls_bad_meta_names_file_and_line(tmp_path, image_dir, text, name, match):
    meta = write_meta(tmp_path, text, name=name)
    with pytest.raises(DataError, match=match):
        ClsMetaDataset(meta_file=meta, image_dir=str(image_dir))


def test_cls_label_out_of_range_and_missing_meta(tmp_path, image_dir):
    meta = write_meta(tmp_path, "a.png 0\nsub/d.png 5\n")
    with pytest.raises(DataError, match=r"meta.txt:2: label 5 is out of range for 3 classes"):
        ClsMetaDataset(meta_file=meta, image_dir=str(image_dir), num_classes=3)
    with pytest.raises(DataError, match="meta file not found"):
        ClsMetaDataset(meta_file=str(tmp_path / "nope.txt"))


def test_cls_unreadable_image_names_meta_line(tmp_path, image_dir):
    (image_dir / "bad.png").write_bytes(b"garbage")
    meta = write_meta(tmp_path, "a.png 0\nbad.png 1\n")
    ds = ClsMetaDataset(meta_file=meta, image_dir=str(image_dir))
    with pytest.raises(DataError, match=r"meta.txt:2: cannot read image .*bad.png"):
        ds[1]


def test_cls_check_files_off_defers_to_load_time(tmp_path, image_dir):
    meta = write_meta(tmp_path, "gone.png 0\n")
    ds = ClsMetaDataset(meta_file=meta, image_dir=str(image_dir), check_files=False)
    with pytest.raises(DataError, match=r"meta.txt:1: image not found"):
        ds[0]
