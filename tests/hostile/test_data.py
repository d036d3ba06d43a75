"""Data that does not fit the config, or is hostile itself: refused in one line (exit 2)
before or as the data is built, with nothing already saved lost."""
import os

import pytest

from conftest import REPO, invoke
from hostile_helpers import assert_one_line, copy_run, fingerprint, moved_aside, trained_run  # noqa: F401

DIGITS_CLS = os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml")
DIGITS_DET = os.path.join(REPO, "configs", "det", "digits_fcos.yaml")


def test_cls_net_with_fewer_classes_than_the_data(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    # over another run's checkpoints only with --fresh (else refused): they are moved aside, intact
    result = invoke(["train", "--config", DIGITS_CLS, "--work-dir", tmp_path, "--fresh", "--opts",
                     "net.kwargs.num_classes=5", "dataset.train.kwargs.subset=16", "dataset.test.kwargs.subset=16"])
    assert_one_line(result, "net.kwargs.num_classes: the net predicts 5 classes but dataset.train has 10",
                    "set net.kwargs.num_classes: 10")
    assert fingerprint(moved_aside(tmp_path)) == before and fingerprint(save_dir) == {}


def test_det_net_with_fewer_classes_than_the_data(tmp_path):
    result = invoke(["train", "--config", DIGITS_DET, "--work-dir", tmp_path, "--opts", "net.kwargs.num_classes=3",
                     "dataset.train.kwargs.num_images=2", "dataset.test.kwargs.num_images=2"])
    assert_one_line(result, "net.kwargs.num_classes: the net predicts 3 classes but dataset.train has 10")
    assert fingerprint(tmp_path / "checkpoints") == {}


def test_digit_scenes_without_any_digit(tmp_path):
    result = invoke(["train", "--config", DIGITS_DET, "--work-dir", tmp_path, "--opts",
                     "dataset.train.kwargs.digits_per_image=[0, 0]"])
    assert_one_line(result, "digits_per_image: expected [min, max] with 0 <= min <= max and max >= 1")
    assert fingerprint(tmp_path / "checkpoints") == {}


# -- files on disk -----------------------------------------------------------------------------------
def png_header_only(path, width, height):
    """A PNG whose header claims width x height (a few bytes on disk): Pillow reads the size
    from the header, as it would for a real decompression bomb, before decoding anything."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit gray
    idat = zlib.compress(b"\0" * 16)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def save_png(path, width, height, value=128):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("L", (width, height), value).save(path)


def folder_cfg(root, **runtime):
    """image_folder classification on ``root`` (classes a, b), no transforms, batch 2."""
    from hostile_helpers import tiny_cfg

    return tiny_cfg(runtime={"seed": 5, **runtime},
                    dataset={"train": {"type": "image_folder", "kwargs": {"root": str(root), "color_mode": "L"}},
                             "test": None, "batch_size": 2, "num_workers": 0},
                    net={"type": "test_mlp", "kwargs": {"in_features": 64, "num_classes": 2}})


def train_folder(tmp_path, root, fresh=False, **runtime):
    from hostile_helpers import write_yaml

    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = write_yaml(tmp_path / "cfg.yaml", folder_cfg(root, **runtime))
    return invoke(["train", "--config", cfg, "--work-dir", tmp_path, *(["--fresh"] if fresh else [])])


def test_decompression_bomb_png_is_one_line(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    save_png(tmp_path / "data" / "a" / "ok.png", 8, 8)
    png_header_only(tmp_path / "data" / "b" / "bomb.png", 20000, 20000)
    result = train_folder(tmp_path, tmp_path / "data", fresh=True)
    assert_one_line(result, f"image {tmp_path / 'data' / 'b' / 'bomb.png'} has 20000 x 20000 pixels, more than "
                    "runtime.max_image_pixels (89478485); raise that limit (or set it to null) if the file is trusted")
    assert fingerprint(moved_aside(tmp_path)) == before and fingerprint(save_dir) == {}


def test_fifo_named_as_an_image_is_one_line(tmp_path):
    """Images go through the one opener too: a FIFO in an image folder would block a worker."""
    from hostile_helpers import fifo

    save_png(tmp_path / "data" / "a" / "ok.png", 8, 8)
    (tmp_path / "data" / "b").mkdir(parents=True)
    with fifo(tmp_path / "data" / "b" / "pipe.png") as pipe:
        result = train_folder(tmp_path / "run", tmp_path / "data")
        assert_one_line(result, f"image {pipe} is a FIFO (named pipe), not a regular file")


def test_pixel_limit_is_configurable_and_strict(tmp_path):
    """Pillow only warns between the limit and twice the limit; here that is refused too."""
    save_png(tmp_path / "data" / "a" / "x.png", 8, 8)
    save_png(tmp_path / "data" / "b" / "y.png", 8, 8)
    result = train_folder(tmp_path, tmp_path / "data", max_image_pixels=40)  # 64 pixels: warning range
    assert_one_line(result, "has 8 x 8 pixels, more than runtime.max_image_pixels (40)")
    ok = train_folder(tmp_path / "ok", tmp_path / "data", max_image_pixels=64)
    assert ok.exit_code == 0, (ok.stderr, ok.exception)


def test_images_of_different_sizes_without_a_resize(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    save_png(tmp_path / "data" / "a" / "small.png", 8, 8)
    save_png(tmp_path / "data" / "b" / "large.png", 10, 12)
    result = train_folder(tmp_path, tmp_path / "data", fresh=True)
    assert_one_line(result, "images of different sizes in one batch: ", "add a resize to the dataset's transforms, "
                    "e.g. {type: Resize, kwargs: {size: [224, 224]}}")
    # the earlier run moved aside intact, and no exception snapshot of an untrained state written
    assert fingerprint(moved_aside(tmp_path)) == before and fingerprint(save_dir) == {}


COCO_CATEGORY_CASES = [
    ("non-dict", ["person"], "categories[0]: expected a mapping {id, name}, got str person"),
    ("string id", [{"id": "1", "name": "digit"}], "categories[0]: 'id' must be an integer, got str '1'"),
    ("missing id", [{"name": "digit"}], "categories[0]: missing 'id' (keys: name)"),
    ("duplicate id", [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}], "categories[1]: duplicate category id 1"),
]


@pytest.mark.parametrize("what,categories,message", COCO_CATEGORY_CASES, ids=[c[0] for c in COCO_CATEGORY_CASES])
def test_malformed_coco_categories(tmp_path, what, categories, message):
    import json

    save_png(tmp_path / "images" / "1.png", 16, 16)
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps({"images": [{"id": 1, "file_name": "1.png", "height": 16, "width": 16}],
                               "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 8, 8]}],
                               "categories": categories}))
    result = invoke(["train", "--config", DIGITS_DET, "--work-dir", tmp_path, "--opts",
                     f"dataset.train={{type: coco, kwargs: {{ann_file: {ann}, img_dir: {tmp_path / 'images'}}}}}",
                     "dataset.test=null"])
    assert_one_line(result, f"{ann}: {message}")
