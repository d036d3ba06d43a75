"""A sample that fails on its way through the pipeline is one line naming it: its file (and the
line of its list file), the step that failed and the split, in the main process and in
DataLoader workers, with either transport (the batch ring or torch's own)."""
import numpy as np
import pytest
from PIL import Image

from conftest import invoke
from hostile_helpers import assert_one_line, tiny_cfg, write_yaml

CROP = [{"type": "RandomCrop", "kwargs": {"size": 8}}]
LOADERS = [(0, "ring"), (2, "ring"), (2, "torch")]


def image_folder(root, bad=None):
    """16 grey 8x8 images in two class folders; ``bad`` (a relative path): a 4x4 one instead."""
    for c in range(2):
        (root / f"c{c}").mkdir(parents=True, exist_ok=True)
        for i in range(8):
            name = f"c{c}/{i}.png"
            side = 4 if name == bad else 8
            Image.fromarray(np.full((side, side), 20 * i + c, np.uint8)).save(root / name)
    return root


def folder_cfg(train_root, test_root, workers, transport, transforms=CROP):
    kwargs = {"color_mode": "L", "transforms": transforms}
    return tiny_cfg(dataset={"train": {"type": "image_folder", "kwargs": {"root": str(train_root), **kwargs}},
                             "test": {"type": "image_folder", "kwargs": {"root": str(test_root), **kwargs}},
                             "batch_size": 4, "test_batch_size": 4, "num_workers": workers,
                             "worker_transport": transport},
                    net={"type": "test_cnn", "kwargs": {"num_classes": 2}})


@pytest.mark.parametrize("workers, transport, split", [(*loader, "train") for loader in LOADERS]
                         + [(2, "ring", "test")])  # the evaluation set: after one epoch of training
def test_a_transform_failing_on_one_image_names_the_image_and_the_transform(tmp_path, workers, transport, split):
    bad = "c1/3.png"
    train = image_folder(tmp_path / "train", bad if split == "train" else None)
    test = image_folder(tmp_path / "test", bad if split == "test" else None)
    cfg = write_yaml(tmp_path / "cfg.yaml", folder_cfg(train, test, workers, transport))
    result = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
    line = assert_one_line(result, f"{tmp_path / split / bad}: transform RandomCrop failed on dataset.{split} sample ",
                           "ValueError: Required crop size (8, 8) is larger than input image size (4, 4)")
    assert "Original Traceback" not in line and "worker process" not in line


@pytest.mark.parametrize("workers, transport", [(0, "ring"), (2, "torch")])
def test_a_list_file_sample_is_named_by_its_line(tmp_path, workers, transport):
    root = image_folder(tmp_path / "images", "c0/5.png")
    lines = [f"c{c}/{i}.png {c}" for c in range(2) for i in range(8)]
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    entry = {"type": "cls", "kwargs": {"meta_file": str(tmp_path / "list.txt"), "image_dir": str(root),
                                       "color_mode": "L", "transforms": CROP}}
    cfg = folder_cfg(root, root, workers, transport)
    cfg["dataset"]["train"] = entry
    cfg["dataset"]["test"] = None
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert_one_line(result, f"{tmp_path / 'list.txt'}:6 ({root / 'c0/5.png'}): transform RandomCrop failed on "
                    "dataset.train sample ")


def test_the_api_raises_the_same_one_line_from_a_worker(tmp_path):
    import up_trainer

    train = image_folder(tmp_path / "train", "c0/0.png")
    cfg = folder_cfg(train, image_folder(tmp_path / "test"), 2, "ring")
    with pytest.raises(up_trainer.DataError) as caught:
        up_trainer.train(cfg, work_dir=tmp_path / "run")
    assert str(caught.value).startswith(f"{train / 'c0/0.png'}: transform RandomCrop failed on dataset.train sample ")
    assert "\n" not in str(caught.value)
