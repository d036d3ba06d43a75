"""Pretrained weights by name, attacked offline: a missing file, a file that is not the
published one, names that mean nothing here. Each is one ``up: error:`` line, exit 2, naming
what to do (the URL and the exact cache path for a missing file); no checkpoint is lost and
nothing reaches the network (``no_network`` fails every attempt)."""
import pytest
import torch
import torchvision

from conftest import invoke, tiny_cfg
from hostile_helpers import assert_one_line, fingerprint, seed_checkpoint, write_yaml
from network_guard import no_network, torch_home  # noqa: F401  (fixtures)

URL = "https://download.pytorch.org/models/resnet18-f37072fd.pth"


@pytest.fixture
def classifier_cfg(tmp_path):
    """The digits resnet18 classifier (1 input channel: the ImageNet stem would be adapted)."""
    return write_yaml(tmp_path / "cfg.yaml", tiny_cfg())


@pytest.mark.parametrize("offline_env", [True, False], ids=["UP_OFFLINE", "no-network"])
def test_train_with_missing_weights_is_one_line_naming_url_and_cache_path(classifier_cfg, tmp_path, torch_home,
                                                                          no_network, monkeypatch, offline_env):
    if offline_env:
        monkeypatch.setenv("UP_OFFLINE", "1")
    work = tmp_path / "work"
    before = seed_checkpoint(work / "checkpoints")
    res = invoke(["train", "--config", classifier_cfg, "--work-dir", work, "--pretrained", "imagenet"])
    cache_path = torch_home / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    assert_one_line(res, "net.kwargs.pretrained", URL, f"put it at {cache_path}")
    assert fingerprint(work / "checkpoints") == before
    assert (no_network == []) is offline_env  # UP_OFFLINE: not even tried


def test_fetch_offline_is_one_line(torch_home, no_network):
    res = invoke(["weights", "fetch", "ResNet18_Weights.IMAGENET1K_V1"])
    assert_one_line(res, URL, str(torch_home / "hub" / "checkpoints" / "resnet18-f37072fd.pth"))


def test_a_file_that_is_not_the_published_one_is_refused(classifier_cfg, tmp_path, torch_home, no_network):
    cache = torch_home / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), cache / "resnet18-f37072fd.pth")
    res = invoke(["train", "--config", classifier_cfg, "--work-dir", tmp_path / "w", "--pretrained", "imagenet"])
    assert_one_line(res, str(cache / "resnet18-f37072fd.pth"), "is not the published", "the file name says f37072fd")
    assert no_network == []


@pytest.mark.parametrize("value, fragments", [
    ("coco", ["net.kwargs.pretrained", "'coco'", "a classifier takes imagenet"]),
    ("ResNet18_Weights.IMAGENET9", ["--pretrained", "did you mean 'ResNet18_Weights.IMAGENET1K_V1'"]),
    ("no/such/file.pth", ["no/such/file.pth"]),
])
def test_train_pretrained_values_that_mean_nothing_here(value, fragments, classifier_cfg, tmp_path, torch_home,
                                                        no_network):
    res = invoke(["train", "--config", classifier_cfg, "--work-dir", tmp_path / "w", "--pretrained", value])
    assert_one_line(res, *fragments)
    assert no_network == []


def test_yaml_names_are_checked_where_they_are_written(tmp_path, torch_home, no_network):
    cfg = tiny_cfg(net={"type": "atss", "kwargs": {"num_classes": 3, "backbone": "mobilenet_v3_large",
                                                   "pretrained": "coco"}})
    res = invoke(["config", "--config", write_yaml(tmp_path / "cfg.yaml", cfg)])
    assert_one_line(res, "net.kwargs.pretrained", "'coco'", "no COCO ATSS weights")
    assert no_network == []


@pytest.mark.parametrize("name", ["imagenet", "resnet18", "yolox_q"])
def test_fetch_of_an_unknown_name_is_one_line(name, torch_home, no_network):
    assert_one_line(invoke(["weights", "fetch", name]), repr(name), "up weights list")
