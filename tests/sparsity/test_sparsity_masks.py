"""Mask computation: N:M groups run along the input dimension (a convolution's input channels
at each output channel and kernel position), keep the largest magnitudes, and zero exactly
M - N of every M; level masks zero exactly the given fraction; which layers are masked."""
import pytest
import torch
from torch import nn

from up_trainer.sparsity.masks import (is_semi_structured, level_mask, mask_misfit, maskable_layers,
                                       semi_structured_mask)
from up_trainer.sparsity.spec import read_sparsity


def reference_mask(weight, m, zeros):
    """Element by element: for every (out, kernel position, group of m input channels) keep the
    m - zeros largest |w|."""
    mask = torch.zeros_like(weight, dtype=torch.bool)
    w4 = weight if weight.dim() == 4 else weight[:, :, None, None]
    m4 = mask if mask.dim() == 4 else mask[:, :, None, None]
    for o in range(w4.shape[0]):
        for y in range(w4.shape[2]):
            for x in range(w4.shape[3]):
                for start in range(0, w4.shape[1], m):
                    group = w4[o, start:start + m, y, x].abs()
                    for i in group.argsort(descending=True)[:m - zeros]:
                        m4[o, start + i, y, x] = True
    return mask


@pytest.mark.parametrize("shape, m, zeros", [((6, 8), 4, 2), ((5, 8, 3, 3), 4, 2), ((3, 16, 1, 2), 8, 6)])
def test_semi_structured_mask_matches_the_element_by_element_definition(shape, m, zeros):
    torch.manual_seed(0)
    weight = torch.randn(shape)
    mask = semi_structured_mask(weight, m, zeros)
    assert torch.equal(mask, reference_mask(weight, m, zeros))
    assert is_semi_structured(mask, m, zeros) and int((~mask).sum()) * m == weight.numel() * zeros


def test_a_mask_that_is_2_4_along_the_output_dimension_only_is_refused():
    mask = torch.tensor([True, False] * 4)[:, None].expand(8, 8).contiguous()  # rows all kept or all zero
    assert is_semi_structured(mask.t().contiguous(), 4, 2) and not is_semi_structured(mask, 4, 2)


def test_level_mask_zeroes_exactly_the_smallest_fraction():
    weight = torch.arange(1.0, 101.0).reshape(10, 10) * torch.tensor([1.0, -1.0]).repeat(50).reshape(10, 10)
    mask = level_mask(weight, 0.37)
    assert int((~mask).sum()) == 37 and weight.abs()[~mask].max() < weight.abs()[mask].min()


def net():
    return nn.Sequential(nn.Conv2d(3, 16, 3), nn.Conv2d(16, 16, 3, groups=16), nn.Conv2d(16, 32, 1),
                         nn.Flatten(), nn.Linear(32, 10))


def test_which_layers_are_masked():
    names = lambda spec: [n for n, _ in maskable_layers(net(), read_sparsity(spec))]  # noqa: E731
    assert names({"scheduler": "semi_structured"}) == ["2", "4"]  # the RGB stem and the depthwise conv do not split
    assert names({"scheduler": "semi_structured", "exclude": ["4"]}) == ["2"]
    assert names({"scheduler": "levels", "levels": [0.5]}) == ["0", "1", "2", "4"]
    assert names({"scheduler": "levels", "levels": [0.5], "skip_depthwise": True}) == ["0", "2", "4"]


def test_mask_misfit_names_the_layer_and_the_reason():
    spec = read_sparsity({"scheduler": "levels", "levels": [0.5]})
    layers = maskable_layers(net(), spec)
    masks = {n: level_mask(m.weight, 0.5) for n, m in layers}
    assert mask_misfit(layers, masks, spec, 0.5) is None
    assert "not level 0.25" in mask_misfit(layers, masks, spec, 0.25)
