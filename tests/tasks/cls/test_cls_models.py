"""Classification models: every torchvision arch registers and builds; stems, pretrained, errors."""
import logging

import pytest
import torch
import torchvision
from torch import nn

from up_trainer.errors import ConfigError, DataError, UserError
from up_trainer.registry import MODELS
from up_trainer.tasks.cls.models import ARCHS, ClassificationModel, first_conv
from up_trainer.tasks.net import ComposedModel, build_model


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny inputs: one intra-op thread is faster, and immune to a busy machine's oversubscription.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def build(arch, **kwargs):
    return MODELS.build({"type": arch, "kwargs": kwargs}, "net")


def last_layer(module):
    """The classifier layer: the last Linear/Conv2d in registration order."""
    return [m for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d))][-1]


def out_dim(layer):
    return layer.out_features if isinstance(layer, nn.Linear) else layer.out_channels


def test_every_torchvision_classifier_is_registered():
    expected = set(torchvision.models.list_models(module=torchvision.models))
    assert expected == set(ARCHS)
    assert expected <= set(MODELS.names())
    for name in ("resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf",
                 "convnext_tiny", "vit_b_16", "swin_t", "densenet121"):
        assert name in MODELS


# RegNet computes its widths with tensors, which the meta device cannot turn into ints;
# the small RegNets are built for real below.
META_ARCHS = [a for a in ARCHS if not a.startswith("regnet")]


@pytest.mark.parametrize("arch", META_ARCHS)
def test_arch_builds_with_classes_and_channels(arch):
    # The meta device builds the graph without allocating weights: every arch in milliseconds.
    with torch.device("meta"):
        model = build(arch, num_classes=7, in_channels=1)
    assert isinstance(model, ClassificationModel)
    assert [name for name, _ in model.named_children()] == ["backbone"]
    assert first_conv(model.backbone)[3].in_channels == 1
    assert out_dim(last_layer(model.backbone)) == 7


@pytest.mark.parametrize("arch,kwargs,size", [
    ("vit_b_16", {"image_size": 32}, 32),
    ("swin_t", {}, 32),
    ("convnext_tiny", {}, 32),
    ("maxvit_t", {"image_size": 224}, 224),  # partitions of 7 at every stage
    ("inception_v3", {}, 80),
    ("googlenet", {}, 32),
])
def test_heavy_archs_forward_shapes_on_meta(arch, kwargs, size):
    with torch.device("meta"):
        model = build(arch, num_classes=5, in_channels=2, **kwargs)
        model.train()  # googlenet / inception must return plain logits in training too
        out = model({"image": torch.zeros(2, 2, size, size), "label": torch.zeros(2, dtype=torch.long)})
    assert out["logits"].shape == (2, 5)
    assert out["loss"].shape == ()


@pytest.mark.parametrize("arch,size", [
    ("resnet18", 8), ("mobilenet_v3_small", 16), ("efficientnet_b0", 16), ("regnet_y_400mf", 16),
    ("regnet_x_400mf", 16), ("shufflenet_v2_x0_5", 16), ("mnasnet0_5", 16),
])
def test_small_input_forward_train_and_eval(arch, size):
    torch.manual_seed(0)
    model = build(arch, num_classes=4, in_channels=1, small_input=True)
    batch = {"image": torch.rand(3, 1, size, size), "label": torch.tensor([0, 1, 3])}
    model.train()
    out = model(batch)
    assert set(out) == {"logits", "loss"}
    assert out["logits"].shape == (3, 4) and torch.isfinite(out["loss"])
    out["loss"].backward()
    model.eval()
    with torch.no_grad():
        out = model(batch)
        assert set(out) == {"logits", "loss", "scores", "preds"}
        assert torch.allclose(out["scores"].sum(1), torch.ones(3))
        assert out["preds"].dtype == torch.int64 and out["preds"].shape == (3,)
        unlabeled = model({"image": batch["image"]})
    assert "loss" not in unlabeled and unlabeled["preds"].shape == (3,)


def test_training_without_labels_is_an_error():
    with torch.device("meta"):
        model = build("resnet18", num_classes=3)
        with pytest.raises(DataError, match="label"):
            model({"image": torch.zeros(1, 3, 8, 8)})


def test_channel_mismatch_names_the_fix():
    with torch.device("meta"):
        model = build("resnet18", num_classes=3, in_channels=1)
        with pytest.raises(ConfigError, match="expects 1-channel images.*has 3"):
            model({"image": torch.zeros(1, 3, 8, 8), "label": torch.zeros(1, dtype=torch.long)})


def test_resnet_small_input_stem():
    with torch.device("meta"):
        plain, small = build("resnet18", num_classes=3), build("resnet18", num_classes=3, small_input=True)
    assert plain.backbone.conv1.kernel_size == (7, 7) and plain.backbone.conv1.stride == (2, 2)
    assert isinstance(plain.backbone.maxpool, nn.MaxPool2d)
    assert small.backbone.conv1.kernel_size == (3, 3) and small.backbone.conv1.stride == (1, 1)
    assert isinstance(small.backbone.maxpool, nn.Identity)


def test_small_input_keeps_resolution():
    model = build("resnet18", num_classes=3, small_input=True).eval()
    feats = {}
    model.backbone.layer1.register_forward_hook(lambda m, i, o: feats.update(layer1=o.shape))
    with torch.no_grad():
        model({"image": torch.rand(1, 3, 8, 8)})
    assert feats["layer1"][-2:] == (8, 8)  # the ImageNet stem would have made it 2x2


def test_small_input_other_families_drop_stem_stride():
    with torch.device("meta"):
        assert build("mobilenet_v2", small_input=True).backbone.features[0][0].stride == (1, 1)
        assert build("efficientnet_b0", small_input=True).backbone.features[0][0].stride == (1, 1)
        dense = build("densenet121", small_input=True).backbone.features
        assert dense.conv0.kernel_size == (3, 3) and isinstance(dense.pool0, nn.Identity)
    assert build("regnet_y_400mf", num_classes=3, small_input=True).backbone.stem[0].stride == (1, 1)


def test_small_input_unsupported_arch_says_which_are():
    with pytest.raises(ConfigError) as exc:
        with torch.device("meta"):
            build("vgg11", small_input=True)
    assert exc.value.path == "net.kwargs.small_input"
    assert "resnet" in str(exc.value) and "vgg11" in str(exc.value)


def test_pretrained_local_file_tolerant_and_reported(tmp_path, caplog):
    torch.manual_seed(1)
    source = torchvision.models.resnet18(num_classes=5)  # torchvision key format, other head size
    path = tmp_path / "r18.pth"
    torch.save(source.state_dict(), path)
    with caplog.at_level(logging.INFO, logger="up"):
        model = build("resnet18", num_classes=10, in_channels=1, pretrained=str(path))
    report = model.pretrained_report
    assert any(m.startswith("fc.weight") for m in report["mismatched"])
    assert any(m.startswith("fc.bias") for m in report["mismatched"])
    assert report["missing"] == [] and report["unexpected"] == []  # fc is in the file, with another shape
    assert "fc.weight" not in report["loaded"]
    assert torch.equal(model.backbone.layer1[0].conv1.weight, source.layer1[0].conv1.weight)
    # the RGB stem is summed into the single gray channel rather than dropped
    assert torch.allclose(model.backbone.conv1.weight, source.conv1.weight.sum(1, keepdim=True))
    assert "fc.weight" in caplog.text and "shape-mismatched" in caplog.text


def test_pretrained_from_our_checkpoint_format(tmp_path):
    torch.manual_seed(2)
    source = build("resnet18", num_classes=3, in_channels=1, small_input=True)
    path = tmp_path / "ckpt.pth"
    torch.save({"model": source.state_dict(), "epoch": 1}, path)  # keys start with backbone.
    model = build("resnet18", num_classes=3, in_channels=1, small_input=True, pretrained=str(path))
    assert model.pretrained_report["missing"] == [] and model.pretrained_report["mismatched"] == []
    for a, b in zip(model.state_dict().values(), source.state_dict().values()):
        assert torch.equal(a, b)


def test_pretrained_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found") as exc:
        build("resnet18", num_classes=3, pretrained=str(tmp_path / "nope.pth"))
    assert exc.value.path == "net.kwargs.pretrained"


def test_vit_image_size_must_fit_the_patches():
    with pytest.raises(ConfigError, match="patch size") as exc:
        with torch.device("meta"):
            build("vit_b_16", image_size=30)
    assert exc.value.path == "net.kwargs.image_size"


def test_unknown_model_type_suggests_close_names():
    with pytest.raises(ConfigError) as exc:
        build_model({"type": "resnet19", "kwargs": {}})
    assert exc.value.path == "net.type"
    assert "did you mean 'resnet18'" in str(exc.value)


@pytest.mark.parametrize("kwargs,path,text", [
    ({"num_clases": 3}, "net.kwargs.num_clases", "did you mean 'num_classes'"),
    ({"num_classes": "3"}, "net.kwargs.num_classes", "expected int"),
    ({"small_input": "yes"}, "net.kwargs.small_input", "expected bool"),
    ({"num_classes": 0}, "net.kwargs.num_classes", ">= 1"),
    ({"image_size": 32}, "net.kwargs.image_size", "only vit"),
    ({"label_smoothing": 1.5}, "net.kwargs.label_smoothing", "[0, 1)"),
    ({"arch_kwargs": {"widht": 2}}, "net.kwargs.arch_kwargs", "widht"),
])
def test_bad_kwargs_name_their_path(kwargs, path, text):
    with pytest.raises(ConfigError) as exc:
        with torch.device("meta"):
            build_model({"type": "resnet18", "kwargs": kwargs})
    assert exc.value.path == path
    assert text in str(exc.value)


def test_arch_kwargs_reach_torchvision():
    with torch.device("meta"):
        model = build("mobilenet_v2", num_classes=3, arch_kwargs={"width_mult": 0.5})
    assert model.backbone.features[0][0].out_channels == 16


def test_label_smoothing_changes_the_loss():
    torch.manual_seed(0)
    model = build("resnet18", num_classes=3, small_input=True)
    smooth = build("resnet18", num_classes=3, small_input=True, label_smoothing=0.2)
    smooth.load_state_dict(model.state_dict())
    batch = {"image": torch.rand(2, 3, 8, 8), "label": torch.tensor([0, 2])}
    model.eval(), smooth.eval()
    with torch.no_grad():
        assert not torch.allclose(model(batch)["loss"], smooth(batch)["loss"])


# -- net section: the list form ----------------------------------------------------------------
def test_list_form_single_classifier_entry():
    with torch.device("meta"):
        model = build_model([{"name": "backbone", "type": "resnet18", "kwargs": {"num_classes": 4}}])
    assert isinstance(model, ClassificationModel) and model.num_classes == 4


@pytest.mark.parametrize("cfg,path,text", [
    ([{"name": "backbone", "type": "resnet18", "kwags": {}}], "net[0].kwags", "did you mean 'kwargs'"),
    ([{"type": "resnet18"}], "net[0].name", "required"),
    ([{"name": "backbone"}], "net[0].type", "required"),
    ([{"name": "train", "type": "resnet18"}], "net[0].name", "cannot name a module"),
    ([], "net", "empty"),
    ("resnet18", "net", "expected"),
    ([{"name": "backbone", "type": "resnet18"}, {"name": "head", "type": "resnet18"}],
     "net[1]", "must be the only net entry"),
    # UP's parts make the list UP's net form, which needs all three classification parts
    ([{"name": "backbone", "type": "resnet18"}, {"name": "head", "type": "base_cls_head"}],
     "net", "do not form a mapped net"),
    ([{"name": "backbone", "type": "resnet18", "kwargs": {"num_clases": 3}}], "net[0].kwargs.num_clases",
     "did you mean"),
    ([{"name": "backbone", "type": "resnt18"}], "net[0].type", "did you mean 'resnet18'"),
])
def test_list_form_errors(cfg, path, text):
    with pytest.raises(ConfigError) as exc:
        with torch.device("meta"):
            build_model(cfg)
    assert exc.value.path == path
    assert text in str(exc.value)


class _Double(nn.Module):
    def __init__(self, key: str = "image"):
        super().__init__()
        self.key = key
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, data):
        return {"feat": data[self.key] * self.scale}


class _SumLoss(nn.Module):
    def forward(self, data):
        return {"loss": data["feat"].sum()}


MODELS.register("test_double")(_Double)
MODELS.register("test_sum_loss")(_SumLoss)


def test_list_form_several_parts_compose_by_name():
    model = build_model([{"name": "neck", "type": "test_double"}, {"name": "head", "type": "test_sum_loss"}])
    assert isinstance(model, ComposedModel)
    assert [n for n, _ in model.named_children()] == ["neck", "head"]
    out = model({"image": torch.ones(2, 3)})
    assert out["loss"].item() == 12.0


def test_list_form_duplicate_names():
    with pytest.raises(ConfigError, match="duplicate") as exc:
        build_model([{"name": "a", "type": "test_double"}, {"name": "a", "type": "test_sum_loss"}])
    assert exc.value.path == "net[1].name"
