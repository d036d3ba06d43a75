"""Pretrained weights by name, offline: a file placed in TORCH_HOME under the name torchvision
gives it is found, verified against the sha256 digits in that name, and loaded; a file that
does not match is refused; a missing one is refused in one line naming the URL and the cache
path. No test here reaches the network: ``no_network`` fails (and records) every attempt."""
import hashlib
import os

import pytest
import torch
import torchvision
from torchvision.models import ResNet18_Weights

from network_guard import no_network, torch_home  # noqa: F401  (fixtures)
from up_trainer.errors import ConfigError
from up_trainer.pretrained import weights_path
from up_trainer.registry import MODELS

RESNET18 = ResNet18_Weights.IMAGENET1K_V1


def random_resnet18_file(path):
    """A real torchvision resnet18 state dict, randomly initialised, saved at ``path``."""
    torch.manual_seed(0)
    state = torchvision.models.resnet18(weights=None).state_dict()
    torch.save(state, path)
    return state


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def placed_resnet18(torch_home, tmp_path, monkeypatch):
    """A resnet18 file in the cache under a torchvision-style name carrying its own sha256
    prefix, and ResNet18_Weights.IMAGENET1K_V1's URL pointing at that name: what a user who
    placed the published file has, with a file this test can make."""
    made = tmp_path / "made.pth"
    state = random_resnet18_file(made)
    name = f"resnet18-{sha256_of(made)[:8]}.pth"
    cache = torch_home / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    os.replace(made, cache / name)
    monkeypatch.setattr(RESNET18.value, "url", f"https://download.pytorch.org/models/{name}")
    return cache / name, state


def test_a_placed_file_is_found_verified_and_loaded_into_the_backbone(placed_resnet18, no_network):
    path, state = placed_resnet18
    model = MODELS.build({"type": "atss", "kwargs": {"num_classes": 3, "backbone": "resnet18",
                                                     "pretrained_backbone": "imagenet"}}, "net")
    assert torch.equal(model.state_dict()["backbone.conv1.weight"], state["conv1.weight"])
    assert torch.equal(model.state_dict()["backbone.layer4.1.bn2.running_var"], state["layer4.1.bn2.running_var"])
    assert no_network == []


def test_a_classifier_takes_the_full_torchvision_name(placed_resnet18, no_network):
    path, state = placed_resnet18
    model = MODELS.build({"type": "resnet18", "kwargs": {"num_classes": 4,
                                                         "pretrained": "ResNet18_Weights.IMAGENET1K_V1"}}, "net")
    assert torch.equal(model.backbone.layer2[0].conv1.weight, state["layer2.0.conv1.weight"])
    assert model.pretrained_report["mismatched"] == ["fc.weight (1000, 512) vs (4, 512)", "fc.bias (1000,) vs (4,)"]
    assert no_network == []


def test_a_file_that_does_not_match_the_hash_in_its_name_is_refused(placed_resnet18, no_network):
    path, _ = placed_resnet18
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: still a loadable-looking zip, not the named file
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as err:
        weights_path("imagenet", "pretrained_backbone", imagenet="resnet18")
    message = str(err.value)
    assert str(path) in message and "is not the published ResNet18_Weights.IMAGENET1K_V1" in message
    assert "up weights fetch ResNet18_Weights.IMAGENET1K_V1" in message
    assert no_network == []


def test_a_file_under_the_real_name_is_checked_against_the_real_hash(torch_home, no_network):
    """No monkeypatching: torchvision's own name, resnet18-f37072fd.pth, holding another file."""
    cache = torch_home / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    random_resnet18_file(cache / "resnet18-f37072fd.pth")
    with pytest.raises(ConfigError, match="its sha256 starts [0-9a-f]{8}, the file name says f37072fd"):
        weights_path("ResNet18_Weights.IMAGENET1K_V1", "pretrained")
    assert no_network == []


def test_a_missing_file_is_one_line_with_the_url_and_the_cache_path(torch_home, no_network):
    with pytest.raises(ConfigError) as err:
        weights_path("imagenet", "pretrained_backbone", imagenet="resnet18")
    message = str(err.value)
    assert "\n" not in message
    assert RESNET18.url in message
    assert str(torch_home / "hub" / "checkpoints" / "resnet18-f37072fd.pth") in message
    assert no_network, "the download was tried (and stopped by the guard)"
    assert not list((torch_home / "hub" / "checkpoints").iterdir()), "no partial file is left"


def test_up_offline_refuses_without_trying_the_network(torch_home, no_network, monkeypatch):
    monkeypatch.setenv("UP_OFFLINE", "1")
    with pytest.raises(ConfigError, match="UP_OFFLINE is set.*yolox_s.pth"):
        weights_path("coco", "pretrained", coco="yolox_s")
    assert no_network == []


def test_local_files_and_no_weights_pass_through_unchanged(tmp_path, no_network):
    assert weights_path(None, "pretrained") is None
    assert weights_path("none", "pretrained") is None
    assert weights_path(str(tmp_path / "mine.pth"), "pretrained") == str(tmp_path / "mine.pth")
    assert weights_path("backbone.pth", "pretrained") == "backbone.pth"
    assert no_network == []


@pytest.mark.parametrize("value, kwargs, fragment", [
    ("coco", {"coco": "torchvision publishes no COCO atss weights"}, "'coco': torchvision publishes no COCO"),
    ("imagenet", {"imagenet": None}, "'imagenet': no imagenet weights fit here"),
    ("ResNet18_Weights.IMAGENET1K_V9", {}, "did you mean 'ResNet18_Weights.IMAGENET1K_V1'"),
])
def test_names_that_mean_nothing_here_are_one_line(value, kwargs, fragment, no_network):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        weights_path(value, "pretrained", **kwargs)
    assert no_network == []


def test_up_train_pretrained_finds_the_placed_file(placed_resnet18, tmp_path, no_network):
    """The command line end to end: --pretrained names the weights, the run loads the placed file."""
    import yaml

    from conftest import invoke, tiny_cfg

    path, _ = placed_resnet18
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(tiny_cfg()))
    work = tmp_path / "work"
    res = invoke(["train", "--config", cfg, "--work-dir", work, "--dry-run", "--pretrained", "imagenet"])
    assert res.exit_code == 0, res.stderr
    log = (work / "train.log").read_text()
    assert f"pretrained {path}: loaded" in log, log
    assert no_network == []
