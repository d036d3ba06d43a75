"""UP's stronger classification parts, each on small hand-computed cases: ResNet-D, MobileNetV3
(UP's block order), ViT with drop path, norm_linear, softmax_eql with gradient_collector,
RandAugIncre."""
import pytest
import torch
from torch import nn

from up_trainer.errors import ConfigError
from up_trainer.tasks.up_nets.backbones import build_resnet, pooled_shortcut
from up_trainer.tasks.up_nets.options import Options


def resnet(arch, **kwargs):
    trunk, _ = build_resnet(arch, Options({"normalize": {"type": "solo_bn"}, **kwargs}, "net[0].kwargs", arch))
    return trunk


def n_params(module):
    return sum(p.numel() for p in module.parameters())


# -- ResNet-D ------------------------------------------------------------------------------------
def test_resnet50_d_matches_the_published_parameter_count_and_shapes():
    trunk = resnet("resnet50_D")
    head = 2048 * 1000 + 1000
    assert round((n_params(trunk) + head) / 1e6, 1) == 25.6  # ResNet-50-D, He et al. 2019
    assert n_params(trunk) + head == 25_557_032  # the average pool adds nothing to ResNet-50
    deep = resnet("resnet50_D", deep_stem=True)
    # 7x7x3x64 conv -> 3x3 convs 3->32, 32->32, 32->64 plus two 32-channel norms
    assert n_params(deep) - n_params(trunk) == (27 * 32 + 9 * 32 * 32 + 9 * 32 * 64 + 2 * 64) - 49 * 3 * 64
    assert round((n_params(deep) + head) / 1e6, 1) == 25.6
    with torch.no_grad():
        out = deep.eval()(torch.randn(1, 3, 64, 48))
    assert [o.shape for o in out] == [(1, 2048, 2, 2)]
    for i, stride in ((1, 1), (2, 2), (3, 2), (4, 2)):
        down = getattr(trunk, f"layer{i}")[0].downsample
        assert [type(m) for m in down] == [nn.ZeroPad2d, nn.AvgPool2d, nn.Conv2d, nn.BatchNorm2d]
        assert down[1].stride == stride and down[2].stride == (1, 1)
        assert torch.equal(down[3].weight, torch.zeros_like(down[3].weight))  # UP zeroes them without initializer


def test_up_d_shortcut_pads_top_left_and_counts_the_zeros():
    conv = nn.Conv2d(1, 1, 1, stride=2, bias=False)
    nn.init.ones_(conv.weight)
    down = pooled_shortcut(nn.Sequential(conv, nn.Identity()), 2, up_d=True)
    x = torch.arange(16.0).view(1, 1, 4, 4)
    # windows start one pixel up/left: [pad, pad; pad, x00], [pad, pad; x01, x02], ...
    want = torch.tensor([[0 / 4, (1 + 2) / 4], [(4 + 8) / 4, (5 + 6 + 9 + 10) / 4]])
    assert torch.allclose(down(x)[0, 0], want)
    avg = pooled_shortcut(nn.Sequential(nn.Conv2d(1, 1, 1, stride=2, bias=False), nn.Identity()), 2, up_d=False)
    nn.init.ones_(avg[1].weight)
    x = torch.arange(9.0).view(1, 1, 3, 3)  # ceil mode, partial windows average real pixels only
    assert torch.allclose(avg(x)[0, 0], torch.tensor([[(0 + 1 + 3 + 4) / 4, (2 + 5) / 2], [(6 + 7) / 2, 8.0]]))


def test_resnet_d_takes_only_up_resnet_d_kwargs():
    with pytest.raises(ConfigError, match=r"net\[0\].kwargs.drop_path_rate: UP kwarg not supported"):
        resnet("resnet50_D", drop_path_rate=0.1)
    plain = resnet("resnet18", avg_down=True, deep_stem=True)
    assert isinstance(plain.layer2[0].downsample[0], nn.AvgPool2d) and isinstance(plain.conv1, nn.Sequential)
