"""Every pipeline runs on the uint8 images readers decode to and gives what it gives on the
float [0, 1] images datasets used to hand out: the same boxes and labels (the random draws do
not depend on the dtype), the same sizes, pixels within rounding (a level where a resampling
rounds, half a level where colour changes round once), for fixed seeds."""
import copy

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from up_trainer.tasks.det.datasets import apply_transform
from up_trainer.tasks.transforms import build_transforms

SETTINGS = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def picture(h, w, seed):
    """A photo-like uint8 picture: gradients plus noise."""
    g = torch.Generator().manual_seed(seed)
    y, x = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    base = torch.stack([x, y, (x + y) / 2]) * 200 + 20 + torch.randn(3, h, w, generator=g) * 10
    return base.round().clamp(0, 255).to(torch.uint8)


@st.composite
def scenes(draw):
    """(uint8 image, target) with 0-4 boxes inside it."""
    h, w = draw(st.integers(24, 64)), draw(st.integers(24, 64))
    boxes = []
    for _ in range(draw(st.integers(0, 4))):
        x1, y1 = draw(st.integers(0, w - 4)), draw(st.integers(0, h - 4))
        boxes.append([x1, y1, draw(st.integers(x1 + 2, w)), draw(st.integers(y1 + 2, h))])
    b = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    size = torch.tensor([h, w])
    target = {"boxes": b, "labels": torch.randint(1, 5, (len(b),)), "ignore_boxes": torch.zeros(0, 4),
              "area": (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]), "image_id": 0, "orig_size": size,
              "img_size": size.clone()}
    return picture(h, w, draw(st.integers(0, 1000))), target


def both(run, image, seed):
    """``run`` on the uint8 image and on its float copy, from the same seed."""
    torch.manual_seed(seed)
    as_uint8 = run(image.clone())
    torch.manual_seed(seed)
    as_float = run(image.float() / 255)
    return as_uint8, as_float


def assert_close_pixels(u8, f32, levels):
    assert u8.dtype == torch.uint8 and f32.dtype == torch.float32 and u8.shape == f32.shape
    diff = (u8.float() - f32 * 255).abs()
    assert diff.max() <= levels + 1e-3, float(diff.max())
    assert diff.mean() <= 0.5, float(diff.mean())  # rounding, not a drift


DET = {  # name: (pipeline, levels)
    "resize_flip_pad": ([{"type": "keep_ar_resize_max", "kwargs": {"scales": [40, 56], "max_size": 80}},
                         {"type": "flip"}, {"type": "pad_to_stride", "kwargs": {"stride": 32}}], 1),
    "improve_geometry": ([{"type": "stitch_expand", "kwargs": {"expand_ratios": 2.0, "expand_prob": 0.8}},
                          {"type": "crop", "kwargs": {"means": [123, 117, 104], "crop_prob": 0.7}},
                          {"type": "fix_output_resize", "kwargs": {"scales": [48, 40]}}, {"type": "flip"}], 1),
    "improve_color": ([{"type": "color_jitter", "kwargs": {"brightness": 0.3, "contrast": 0.3, "saturation": 0.3,
                                                           "hue": 0.05, "brightness_delta": 20, "hue_delta": 10,
                                                           "channel_shuffle": True, "prob": 0.8}}], 0.5),
    "up_det_to_tensor_normalize": ([{"type": "keep_ar_resize", "kwargs": {"scales": [32], "max_size": 64}},
                                    {"type": "flip", "kwargs": {"flip_p": 0.5}}, {"type": "to_tensor"},
                                    {"type": "normalize", "kwargs": {"mean": [0.5] * 3, "std": [0.25] * 3}}], 1),
}


@pytest.mark.parametrize("name", sorted(DET))
@SETTINGS
@given(scene=scenes(), seed=st.integers(0, 2**31))
def test_detection_pipelines_on_uint8_match_float(name, scene, seed):
    from up_trainer.data.model_input import split_model_input

    pipeline, levels = DET[name]
    transform, model_input = split_model_input(build_transforms(pipeline))
    image, target = scene
    (u8, t8), (f32, t32) = both(lambda im: apply_transform(transform, im, copy.deepcopy(target)), image, seed)
    for key in ("boxes", "ignore_boxes"):
        assert t8[key].shape == t32[key].shape and torch.allclose(t8[key], t32[key], rtol=0, atol=1.0), key
    for key in ("labels", "img_size"):
        assert torch.equal(t8[key], t32[key]), key
    assert_close_pixels(u8, f32, levels)
    # the model receives the same input within rounding too (the conversion of each, as it would run)
    diff = (model_input(u8) - model_input(f32)).abs().max()
    assert diff <= (levels + 1e-3) / 255 / min(model_input.std or (1.0,)), float(diff)


CLS = {
    "resized_crop_flip": ([{"type": "torch_random_resized_crop", "kwargs": {"size": 24}},
                           {"type": "torch_random_horizontal_flip"}], 1),
    "color_jitter": ([{"type": "torch_color_jitter", "kwargs": {"brightness": 0.4, "contrast": 0.4,
                                                                "saturation": 0.4, "hue": 0.1}}], 0.5),
    "auto_augmentation": ([{"type": "torch_auto_augmentation"},
                           {"type": "torch_random_resized_crop", "kwargs": {"size": 24}}], 1),
    "rand_aug_incre": ([{"type": "torch_random_augmentationIncre", "kwargs": {"n": 3, "m": 9,
                                                                               "magnitude_std": 0.5}}], 0),
    "rand_aug": ([{"type": "torch_random_augmentation", "kwargs": {"n": 2, "m": 9}}], 0),
    "resize_center_crop": ([{"type": "torch_resize", "kwargs": {"size": 30}},
                            {"type": "torch_center_crop", "kwargs": {"size": 24}}], 1),
}


@pytest.mark.parametrize("name", sorted(CLS))
@SETTINGS
@given(scene=scenes(), seed=st.integers(0, 2**31))
def test_classification_pipelines_on_uint8_match_float(name, scene, seed):
    pipeline, levels = CLS[name]
    transform = build_transforms(pipeline)
    u8, f32 = both(transform, scene[0], seed)
    assert_close_pixels(u8, f32, levels)


def test_a_float_only_step_in_the_middle_converts_there():
    """Normalize before a flip (and a noise step) still runs: the uint8 image becomes float
    [0, 1] there, as the old float pipelines had it, and the flip then works on float."""
    transform = build_transforms([{"type": "Normalize", "kwargs": {"mean": [0.5] * 3, "std": [0.5] * 3}},
                                  {"type": "RandomHorizontalFlip", "kwargs": {"p": 1.0}},
                                  {"type": "RandomErasing", "kwargs": {"p": 1.0, "value": 0}}])
    image = picture(12, 16, 0)
    u8, f32 = both(transform, image, 3)
    assert u8.dtype == torch.float32 and torch.equal(u8, f32)


def test_to_tensor_in_the_middle_converts_to_unit_float():
    transform = build_transforms([{"type": "to_tensor"}, {"type": "RandomHorizontalFlip", "kwargs": {"p": 1.0}}])
    image = picture(5, 7, 1)
    out = transform(image)
    assert out.dtype == torch.float32 and torch.equal(out, image.flip(-1).float() / 255)


def test_decode_draft_reads_a_large_jpeg_at_the_size_the_resize_needs(tmp_path):
    from PIL import Image

    from up_trainer.data.readers import decode_file
    from up_trainer.errors import ConfigError
    from up_trainer.tasks.cls.datasets import ImageFolderDataset

    (tmp_path / "a").mkdir()
    Image.fromarray(picture(192, 256, 0).permute(1, 2, 0).numpy()).save(tmp_path / "a" / "p.jpg", quality=95)
    pipeline = [{"type": "Resize", "kwargs": {"size": 40}}, {"type": "CenterCrop", "kwargs": {"size": 32}}]
    full = ImageFolderDataset(root=str(tmp_path), transforms=pipeline)
    draft = ImageFolderDataset(root=str(tmp_path), transforms=pipeline, decode_draft=True)
    assert full.draft is None and draft.draft == 40
    assert decode_file(str(tmp_path / "a" / "p.jpg"), "RGB", draft=40).shape == (48, 64, 3)  # 1/4: short side >= 40
    assert decode_file(str(tmp_path / "a" / "p.jpg"), "RGB", draft=(100, 100)).shape == (192, 256, 3)  # no 1/2 fits
    a, b = full[0]["image"], draft[0]["image"]
    assert a.shape == b.shape == (3, 32, 32)
    assert (a.float() - b.float()).abs().mean() <= 3.0  # the decoder's reduction, not a different picture
    with pytest.raises(ConfigError, match="decode_draft: needs a pipeline that starts with a Resize"):
        ImageFolderDataset(root=str(tmp_path), transforms=[{"type": "RandomResizedCrop", "kwargs": {"size": 32}}],
                           decode_draft=True)
