"""UP's loader semantics on native keys: readers, fix_seed, aspect-ratio groups, padding,
batch mixing, and the UP transform names."""
import numpy as np
import pytest
import torch
from PIL import Image

from conftest import loader_cfg

from up_trainer.data.batching import AspectRatioBatchSampler, BatchCutMixup, BatchMixup, pad_images
from up_trainer.data.loader import LoaderFactory
from up_trainer.data.readers import build_reader
from up_trainer.data.sampler import ResumableSampler
from up_trainer.engine.builder import special_bn_init
from up_trainer.errors import ConfigError
from up_trainer.registry import DATASETS
from up_trainer.tasks.transforms import build_transforms


@pytest.fixture
def rgb_png(tmp_path):
    array = np.zeros((2, 3, 3), dtype=np.uint8)
    array[..., 0], array[..., 2] = 200, 10  # red-ish: R=200, B=10
    Image.fromarray(array).save(tmp_path / "a.png")
    return tmp_path


@pytest.mark.parametrize("kind", ["fs_opencv", "fs_pillow"])
def test_readers_color_modes(rgb_png, kind):
    rgb = build_reader({"type": kind, "kwargs": {"image_dir": str(rgb_png), "color_mode": "RGB"}})("a.png")
    assert rgb.shape == (3, 2, 3) and rgb.dtype == torch.uint8 and rgb[0, 0, 0] == 200  # decoded pixels
    gray = build_reader({"type": kind, "kwargs": {"image_dir": str(rgb_png), "color_mode": "GRAY"}})("a.png")
    assert gray.shape == (1, 2, 3)
    if kind == "fs_opencv":
        bgr = build_reader({"type": kind, "kwargs": {"image_dir": str(rgb_png), "color_mode": "BGR"}})("a.png")
        assert torch.equal(bgr, rgb.flip(0))
    else:
        with pytest.raises(ConfigError, match="color_mode: 'BGR' is not one of"):
            build_reader({"type": kind, "kwargs": {"image_dir": str(rgb_png), "color_mode": "BGR"}})


def test_cls_dataset_with_up_reader_type(rgb_png):
    (rgb_png / "meta.txt").write_text("a.png 1\n")
    ds = DATASETS.build({"type": "cls", "kwargs": {"meta_file": str(rgb_png / "meta.txt"), "image_reader": {
        "type": "fs_opencv", "kwargs": {"image_dir": str(rgb_png), "color_mode": "BGR"}}}}, "d")
    assert ds[0]["image"][2, 0, 0] == 200  # BGR: the red channel last
    assert ds.model_input(ds[0]["image"])[2, 0, 0] == pytest.approx(200 / 255)
    with pytest.raises(ConfigError, match=r"d.kwargs.image_reader.type: unknown image reader type 'fs_ceph'"):
        DATASETS.build({"type": "cls", "kwargs": {"meta_file": str(rgb_png / "meta.txt"),
                                                  "image_reader": {"type": "fs_ceph"}}}, "d")


def digits(n=24):
    return DATASETS.build({"type": "digits", "kwargs": {"split": "train", "subset": n}}, "d")


def test_fix_seed_keeps_the_order_of_every_epoch():
    fixed = LoaderFactory(loader_cfg(fix_seed=True), digits(), None, seed=1)
    free = LoaderFactory(loader_cfg(), digits(), None, seed=1)
    order = [lambda f, e: torch.cat([b["index"] for b in f.train_loader(e)]).tolist()][0]
    assert order(fixed, 1) == order(fixed, 2) == order(free, 0)
    assert order(free, 1) != order(free, 2)


def test_aspect_ratio_batches_are_homogeneous_and_resumable():
    ratios = [0.5, 2.0] * 5 + [0.7]  # 11 images, two groups split at 1
    sampler = ResumableSampler(len(ratios), seed=3)
    sampler.set_epoch(2)
    batches = AspectRatioBatchSampler(sampler, ratios, [1], batch_size=2).batches()
    assert len(batches) == 6  # ceil(11 / 2): the epoch length does not depend on grouping
    assert all(len({ratios[i] >= 1 for i in b}) == 1 for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(11))
    resumed = AspectRatioBatchSampler(sampler, ratios, [1], batch_size=2)
    resumed.start_batch = 4
    assert list(resumed) == batches[4:]


def test_pad_images_to_alignment():
    out = pad_images([torch.ones(3, 5, 7), torch.ones(3, 9, 4)], 8, 0.5)
    assert [tuple(o.shape) for o in out] == [(3, 16, 8)] * 2
    assert out[0][0, 0, 6] == 1 and out[0][0, 5, 0] == 0.5 and out[0][0, 0, 7] == 0.5


def test_batch_mixup_soft_labels_and_deterministic_loader():
    factory = LoaderFactory(loader_cfg(batch_fn={"type": "batch_mixup", "kwargs": {"alpha": 0.5,
                                                                                    "num_classes": 10}}),
                            digits(), None, seed=4)
    first = next(iter(factory.train_loader(1)))
    again = next(iter(factory.train_loader(1)))
    assert first["label"].shape == (4, 10) and torch.allclose(first["label"].sum(1), torch.ones(4))
    assert torch.equal(first["image"], again["image"]) and torch.equal(first["label"], again["label"])
    with pytest.raises(ConfigError, match="num_classes"):
        BatchMixup(alpha=1.0, num_classes=3)({"image": torch.zeros(2, 1, 4, 4), "label": torch.tensor([0, 5])})


def test_batch_cutmixup_switches():
    fn = BatchCutMixup(switch_prob=1.0, num_classes=10)
    batch = {"image": torch.rand(4, 3, 8, 8), "label": torch.tensor([0, 1, 2, 3])}
    out = fn(batch)
    assert out["label"].shape == (4, 10) and out["image"].shape == (4, 3, 8, 8)


def test_up_cls_transform_names():
    t = build_transforms([
        {"type": "torch_random_resized_crop", "kwargs": {"size": 8, "scale": [0.5, 1], "interpolation": "bicubic"}},
        {"type": "torch_auto_augmentation", "kwargs": {"size": 8, "scale": [0.08, 1]}},
        {"type": "torch_random_augmentationIncre", "kwargs": {"n": 2, "m": 7, "magnitude_std": 0.5}},
        {"type": "to_tensor"},
        {"type": "normalize", "kwargs": {"mean": [0.5] * 3, "std": [0.2] * 3}},
        {"type": "torch_randerase", "kwargs": {"probability": 1.0}},
    ])
    torch.manual_seed(0)
    assert t(torch.rand(3, 12, 10)).shape == (3, 8, 8)
    with pytest.raises(ConfigError, match="mode: 'rand' is not mapped"):
        build_transforms([{"type": "torch_randerase", "kwargs": {"mode": "rand"}}])


def test_special_bn_init():
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.BatchNorm2d(2))
    special_bn_init(net)
    assert (net[1].eps, net[1].momentum) == (1e-3, 0.03)


def test_unmapped_up_transform_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"t\[0\].type: mosaicv2 is UP's YOLOX mosaic v2.* not map .*instead"):
        build_transforms([{"type": "mosaicv2"}], "t")
