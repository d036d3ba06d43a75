"""`up weights list` and `up weights fetch` on files placed by hand, offline."""
import torch

from conftest import invoke
from network_guard import no_network, torch_home  # noqa: F401  (fixtures)
from test_pretrained_weights import placed_resnet18  # noqa: F401  (fixture)


def row(output, name):
    return next(line.split() for line in output.splitlines() if line.startswith(name + " "))


def test_list_shows_name_size_presence_and_file(placed_resnet18, torch_home, no_network):
    path, _ = placed_resnet18
    res = invoke(["weights", "list"])
    assert res.exit_code == 0, res.stderr
    placed = row(res.stdout, "ResNet18_Weights.IMAGENET1K_V1")
    assert placed[-1] == path.name and placed[-2] == "yes"
    assert f"{path.stat().st_size / 2**20:.1f}" in placed
    assert row(res.stdout, "ResNet34_Weights.IMAGENET1K_V1")[-2:] == ["no", "resnet34-b627a593.pth"]
    assert row(res.stdout, "yolox_s")[-3:] == ["unpublished", "no", "yolox_s.pth"]
    assert str(torch_home / "hub" / "checkpoints") in res.stdout
    urls = invoke(["weights", "list", "--urls"]).stdout.splitlines()
    assert f"https://download.pytorch.org/models/{path.name} {path}" in urls
    assert no_network == []


def test_fetch_verifies_a_placed_file_without_downloading(placed_resnet18, no_network):
    path, _ = placed_resnet18
    res = invoke(["weights", "fetch", "ResNet18_Weights.IMAGENET1K_V1"])
    assert res.exit_code == 0, res.stderr
    assert f"{path} (already there, sha256 prefix {path.name[9:17]} verified)" in res.stdout
    assert no_network == []


def test_a_yolox_file_is_checked_by_its_zip_crcs(torch_home, no_network):
    cache = torch_home / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.save({"model": {"backbone.backbone.stem.conv.conv.weight": torch.randn(16, 12, 3, 3)}},
               cache / "yolox_nano.pth")
    res = invoke(["weights", "fetch", "yolox_nano"])
    assert res.exit_code == 0 and "zip CRC32s verified; no hash is published" in res.stdout, res.stderr
    data = (cache / "yolox_nano.pth").read_bytes()
    (cache / "yolox_nano.pth").write_bytes(data[: len(data) * 2 // 3])  # a download cut short
    res = invoke(["weights", "fetch", "yolox_nano"])
    assert res.exit_code == 2 and "is not a complete yolox_nano file" in res.stderr, res.stderr
    assert no_network == []
