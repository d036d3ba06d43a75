"""The one conversion from a pipeline's uint8 pixels to the model's float input: what it folds
from a pipeline, its arithmetic (the old steps' bit for bit), and that converting on the device
gives the model the same input as converting in the workers."""
import json

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from up_trainer.data.batching import BatchMixup, MixCollate, PadCollate
from up_trainer.data.loader import SeededDataset
from up_trainer.data.context import DataContext, resolve_normalize_on
from up_trainer.data.model_input import ModelInput, batch_to_model, split_model_input
from up_trainer.tasks.transforms import build_transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def normalize_on(where):
    """The DataContext a run hands its data sets for ``dataset.normalize_on: where``."""
    return DataContext(normalize_on=resolve_normalize_on(where, "cpu"))


def build(entry, context=None):
    from up_trainer.engine.builder import build_dataset

    return build_dataset(entry, "dataset.train", context)


def pixels(*shape, seed=0):
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_arithmetic_is_the_old_steps_bit_for_bit():
    x = pixels(2, 3, 5, 7)
    old = v2.Normalize(MEAN, STD)(x.float().div_(255.0))  # decode's div, then the pipeline's normalize
    assert torch.equal(ModelInput(mean=MEAN, std=STD)(x), old)
    assert torch.equal(ModelInput(mean=MEAN, std=STD)(x.float() / 255), old)  # float pixels are [0, 1]
    assert torch.equal(ModelInput()(x), x.float() / 255)
    unit = torch.rand(3, 4, 4)
    assert ModelInput()(unit) is not None and torch.equal(ModelInput()(unit), unit)
    assert [t.shape for t in ModelInput()([x[0], x[1, :, :2]])] == [(3, 5, 7), (3, 2, 7)]
    assert torch.equal(ModelInput(1.0)(x), x.float())
    with pytest.raises(ValueError, match="scale"):
        ModelInput(0)
    with pytest.raises(TypeError, match="uint8 or float"):
        ModelInput()(x.to(torch.int32))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("mean, std", [(MEAN, STD), (None, None)])
def test_a_cpu_batch_converts_image_by_image_to_the_same_bits_and_layout(channels_last, mean, std):
    batch = pixels(4, 3, 9, 11, seed=3)
    if channels_last:
        batch = batch.contiguous(memory_format=torch.channels_last)
    convert = ModelInput(mean=mean, std=std)
    out = convert(batch)
    whole = batch.to(torch.float32).div_(255.0)  # the whole batch at once, as one image is converted
    if mean is not None:
        whole = whole.sub_(torch.tensor(mean).view(-1, 1, 1)).div_(torch.tensor(std).view(-1, 1, 1))
    assert torch.equal(out, whole) and out.stride() == whole.stride()
    assert all(torch.equal(out[i], convert(batch[i])) for i in range(len(batch)))


def test_float_input_is_not_changed_in_place():
    unit = torch.rand(3, 4, 4)
    before = unit.clone()
    ModelInput(mean=MEAN, std=STD)(unit)
    ModelInput(1 / 255 / 255)(unit)
    assert torch.equal(unit, before)


@pytest.mark.parametrize("steps, kept, expected", [
    ([{"type": "to_tensor"}, {"type": "normalize", "kwargs": {"mean": MEAN, "std": STD}}], 1,
     ModelInput(mean=MEAN, std=STD)),
    ([{"type": "Normalize", "kwargs": {"mean": [0.5], "std": [0.5]}}, {"type": "ToImage"}], 1,
     ModelInput(mean=[0.5], std=[0.5])),
    ([], 1, ModelInput()),
    ([{"type": "custom_to_tensor"}], 1, ModelInput()),  # YOLOX: the model scales [0, 1] by 255 itself
    ([{"type": "custom_to_tensor", "kwargs": {"norm_image": True}}], 1, ModelInput(1 / 255 / 255)),
    ([{"type": "normalize", "kwargs": {"mean": [0.5], "std": [0.5]}}, {"type": "RandomHorizontalFlip"}], 3,
     ModelInput()),  # not trailing: stays in the pipeline and converts there
])
def test_split_takes_the_trailing_conversion_steps(steps, kept, expected):
    import up_trainer.tasks.det.yolox.transforms  # noqa: F401  (registers custom_to_tensor)

    pipeline = build_transforms([{"type": "RandomHorizontalFlip"}] + steps)
    rest, model_input = split_model_input(pipeline)
    assert len(rest.transforms) == kept and model_input == expected
    assert split_model_input(None) == (None, ModelInput())
    assert split_model_input([v2.ToDtype(torch.float32, scale=True)]) == ([], ModelInput())
    assert split_model_input([v2.ToDtype(torch.float16)])[1] == ModelInput() and \
        len(split_model_input([v2.ToDtype(torch.float16)])[0]) == 1  # another dtype: left in the pipeline


def test_two_normalizes_fold_into_one():
    x = pixels(3, 4, 4)
    _, model_input = split_model_input([v2.Normalize([0.5] * 3, [0.25] * 3), v2.Normalize(MEAN, STD)])
    old = v2.Normalize(MEAN, STD)(v2.Normalize([0.5] * 3, [0.25] * 3)(x.float() / 255))
    assert torch.allclose(model_input(x), old, atol=1e-5)


# -- where it runs: workers or device ------------------------------------------------------------
def image_folder(tmp_path, pipeline, context=None):
    for k in range(4):
        folder = tmp_path / f"c{k % 2}"
        folder.mkdir(exist_ok=True)
        Image.fromarray(pixels(20 + k, 24, 3, seed=k).numpy()).save(folder / f"{k}.png")
    return build({"type": "image_folder", "kwargs": {"root": str(tmp_path), "transforms": pipeline}}, context)


CLS_PIPELINE = [{"type": "torch_random_resized_crop", "kwargs": {"size": 16}},
                {"type": "torch_random_horizontal_flip"}, {"type": "to_tensor"},
                {"type": "normalize", "kwargs": {"mean": MEAN, "std": STD}}]


def batch_of(dataset, seed=5, collate=None):
    seeded = SeededDataset(dataset, seed)
    samples = seeded.__getitems__([(1, i) for i in range(len(dataset))])
    return (collate or dataset.collate_fn)(samples)


def test_classification_device_input_equals_workers_input(tmp_path):
    workers = batch_of(image_folder(tmp_path, CLS_PIPELINE, normalize_on("workers")))
    device = batch_of(image_folder(tmp_path, CLS_PIPELINE, normalize_on("device")))
    assert workers["image"].dtype == torch.float32 and "model_input" not in workers
    assert device["image"].dtype == torch.uint8 and device["model_input"] == ModelInput(mean=MEAN, std=STD)
    moved = batch_to_model(device, "cpu", torch.channels_last)
    assert "model_input" not in moved and moved["image"].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(moved["image"], batch_to_model(workers, "cpu")["image"])
    assert torch.equal(moved["label"], workers["label"])


def test_padding_is_in_the_model_input_space_either_way(tmp_path):
    """UP's dataloader alignment / pad_value: pad_value is a value of the converted images, so a
    uint8 batch gets it written after its conversion."""
    pipeline = [{"type": "to_tensor"}, {"type": "normalize", "kwargs": {"mean": MEAN, "std": STD}}]
    out = {}
    for where in ("workers", "device"):
        ds = image_folder(tmp_path, pipeline, normalize_on(where))
        batch = batch_of(ds, collate=PadCollate(ds.collate_fn, 16, -3.5))
        out[where] = batch_to_model(batch, "cpu")["image"]
    assert out["device"].shape == (4, 3, 32, 32)
    assert torch.equal(out["device"], out["workers"])
    assert (out["device"][0, :, 20:, :] == -3.5).all() and (out["device"][0, :, :, 24:] == -3.5).all()


def test_batch_mixing_sees_the_converted_images(tmp_path):
    out = {}
    for where in ("workers", "device"):
        ds = image_folder(tmp_path, CLS_PIPELINE, normalize_on(where))
        seeded = SeededDataset(ds, 5)
        collate = MixCollate(ds.collate_fn, BatchMixup(alpha=0.4, num_classes=2), seeded)
        out[where] = batch_to_model(collate(seeded.__getitems__([(1, i) for i in range(4)])), "cpu")
    assert torch.allclose(out["device"]["image"], out["workers"]["image"], atol=1e-6)
    assert torch.equal(out["device"]["label"], out["workers"]["label"])


def test_detection_device_input_equals_workers_input(tmp_path):
    (tmp_path / "img").mkdir()
    images, anns = [], []
    for k in range(3):
        Image.fromarray(pixels(30, 40 + 8 * k, 3, seed=k).numpy()).save(tmp_path / "img" / f"{k}.png")
        images.append({"id": k + 1, "file_name": f"{k}.png", "height": 30, "width": 40 + 8 * k})
        anns.append({"id": k + 1, "image_id": k + 1, "category_id": 1, "bbox": [2, 3, 10, 12], "area": 120,
                     "iscrowd": 0})
    (tmp_path / "ann.json").write_text(json.dumps({"images": images, "annotations": anns,
                                                   "categories": [{"id": 1, "name": "a"}]}))
    pipeline = [{"type": "keep_ar_resize_max", "kwargs": {"scales": [20, 24], "max_size": 40}}, {"type": "flip"},
                {"type": "to_tensor"}, {"type": "normalize", "kwargs": {"mean": MEAN, "std": STD}}]
    out = {}
    for where in ("workers", "device"):
        ds = build({"type": "coco", "kwargs": {"ann_file": str(tmp_path / "ann.json"), "img_dir": str(tmp_path / "img"),
                                               "transforms": pipeline}}, normalize_on(where))
        out[where] = batch_to_model(batch_of(ds), "cpu")
    for a, b in zip(out["device"]["image"], out["workers"]["image"]):
        assert a.dtype == torch.float32 and torch.equal(a, b)
    for a, b in zip(out["device"]["target"], out["workers"]["target"]):
        assert torch.equal(a["boxes"], b["boxes"])


def test_normalize_on_is_a_checked_config_key():
    from up_trainer.config.schema import validate_section
    from up_trainer.errors import ConfigError

    base = {"train": {"type": "digits"}}
    assert validate_section("dataset", base)["normalize_on"] == "auto"
    assert validate_section("dataset", dict(base, normalize_on="workers"))["normalize_on"] == "workers"
    with pytest.raises(ConfigError, match="dataset.normalize_on"):
        validate_section("dataset", dict(base, normalize_on="gpu"))


def test_auto_is_device_on_an_accelerator_and_workers_on_the_cpu():
    assert resolve_normalize_on("auto", "cpu") == "workers"
    assert resolve_normalize_on("auto", torch.device("cuda", 0)) == "device"
    assert resolve_normalize_on("device", "cpu") == "device"
    assert DataContext.from_config({"dataset": {"normalize_on": "auto"}}, "cpu").normalize_on == "workers"


def test_render_draws_uint8_images_as_they_are():
    from up_trainer.render import to_uint8

    x = pixels(3, 4, 5)
    assert torch.equal(to_uint8(x), x)
    assert torch.equal(to_uint8(x[:1]), x[:1].repeat(3, 1, 1))
    assert torch.equal(to_uint8(x.float() / 255), x)
    np.testing.assert_array_equal(to_uint8(x).numpy(), x.numpy())
