"""Transform pipelines from YAML lists: lookup, kwargs checks, UP names, determinism."""
import pytest
import torch
from torchvision.transforms import v2

from up_trainer.errors import ConfigError
from up_trainer.tasks.transforms import ToTensor, build_transforms, torchvision_names


def image(c=1, h=8, w=8):
    return torch.linspace(0, 1, c * h * w).reshape(c, h, w)


def test_empty_is_none():
    assert build_transforms(None) is None
    assert build_transforms([]) is None


def test_torchvision_names_build_in_order():
    t = build_transforms([{"type": "Resize", "kwargs": {"size": 16}},
                          {"type": "Normalize", "kwargs": {"mean": [0.5], "std": [0.5]}}])
    # Normalize is torchvision's, taking uint8 images too (converted to [0, 1] first)
    assert [type(op) for op in t.transforms][0] is v2.Resize and isinstance(t.transforms[1], v2.Normalize)
    out = t(image())
    assert out.shape == (1, 16, 16) and out.min() >= -1.0 and out.max() <= 1.0
    assert "RandomAffine" in torchvision_names() and "Transform" not in torchvision_names()


def test_up_names_are_registered():
    t = build_transforms([
        {"type": "torch_random_resized_crop", "kwargs": {"size": 6, "scale": [0.5, 1.0]}},
        {"type": "torch_random_horizontal_flip"},
        {"type": "to_tensor"},
        {"type": "normalize", "kwargs": {"mean": [0.1], "std": [0.2]}},
    ])
    assert isinstance(t.transforms[2], ToTensor)
    assert t(image()).shape == (1, 6, 6)


def test_randomness_comes_from_torch_global_rng():
    t = build_transforms([{"type": "RandomAffine", "kwargs": {"degrees": 30, "translate": [0.2, 0.2]}}])
    img = image(h=12, w=12)
    torch.manual_seed(3)
    a = t(img)
    torch.manual_seed(3)
    b = t(img)
    torch.manual_seed(4)
    c = t(img)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_interpolation_given_as_string():
    t = build_transforms([{"type": "torch_resize", "kwargs": {"size": 4, "interpolation": "bicubic"}}])
    assert t.transforms[0].interpolation == v2.InterpolationMode.BICUBIC


def test_nested_transforms_for_containers():
    t = build_transforms([{"type": "RandomApply", "kwargs": {
        "p": 1.0, "transforms": [{"type": "RandomHorizontalFlip", "kwargs": {"p": 1.0}}]}}])
    img = image()
    assert torch.equal(t(img), img.flip(-1))


@pytest.mark.parametrize("cfg,path,text", [
    ([{"type": "RandomAfine"}], "aug[0].type", "did you mean 'RandomAffine'"),
    ([{"type": "torch_random_horizontl_flip"}], "aug[0].type", "did you mean 'torch_random_horizontal_flip'"),
    ([{"type": "Normalize", "kwargs": {"mean": [0.5], "std": [0.5]}}, {"type": "Resize", "kwargs": {"sise": 3}}],
     "aug[1].kwargs.sise", "did you mean 'size'"),
    ([{"type": "Resize"}], "aug[0].kwargs.size", "required"),
    ([{"type": "RandomHorizontalFlip", "kwargs": {"p": "half"}}], "aug[0].kwargs.p", "expected float"),
    ([{"type": "RandomAffine", "kwargs": {"degrees": -5}}], "aug[0].kwargs", "RandomAffine"),
    ([{"type": "Resize", "kwargs": {"size": 4, "interpolation": "bilinar"}}], "aug[0].kwargs.interpolation",
     "did you mean 'bilinear'"),
    ([{"type": "Resize", "kwags": {"size": 4}}], "aug[0].kwags", "did you mean 'kwargs'"),
    ([{"kwargs": {}}], "aug[0]", "missing 'type'"),
    (["Resize"], "aug[0]", "expected a mapping"),
    ({"type": "Resize"}, "aug", "expected a list"),
    ([{"type": "Resize", "kwargs": [4]}], "aug[0].kwargs", "expected a mapping"),
    ([{"type": "RandomApply", "kwargs": {"transforms": [{"type": "Flip"}]}}], "aug[0].kwargs.transforms[0].type",
     "unknown transform"),
])
def test_errors_name_the_yaml_path(cfg, path, text):
    with pytest.raises(ConfigError) as exc:
        build_transforms(cfg, "aug")
    assert exc.value.path == path
    assert text in str(exc.value)
