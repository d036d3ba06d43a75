"""UP's FPN with ``upsample: deconv``: each top-down step enlarges the coarser level's merged
map with one 4x4 stride-2 transposed convolution (shared by all levels, UP's ``deconv``)
instead of nearest-neighbour interpolation; everything else is torchvision's FPN."""
from collections import OrderedDict

from torch import nn
from torchvision.ops import FeaturePyramidNetwork


class DeconvFPN(FeaturePyramidNetwork):
    def __init__(self, in_channels_list, out_channels, **kwargs):
        super().__init__(in_channels_list, out_channels, **kwargs)
        self.deconv = nn.ConvTranspose2d(out_channels, out_channels, kernel_size=4, stride=2, padding=1)

    def forward(self, x):
        names, feats = list(x.keys()), list(x.values())
        last_inner = self.get_result_from_inner_blocks(feats[-1], -1)
        results = [self.get_result_from_layer_blocks(last_inner, -1)]
        for idx in range(len(feats) - 2, -1, -1):
            lateral = self.get_result_from_inner_blocks(feats[idx], idx)
            up = self.deconv(last_inner)
            if up.shape[-2:] != lateral.shape[-2:]:  # UP adds the maps as they are: odd sizes cannot be added
                raise ValueError(f"upsample: deconv doubles a {tuple(last_inner.shape[-2:])} map to "
                                 f"{tuple(up.shape[-2:])}, but the finer level is {tuple(lateral.shape[-2:])}: pad "
                                 "the images to a multiple of the coarsest stride (dataloader alignment)")
            last_inner = lateral + up
            results.insert(0, self.get_result_from_layer_blocks(last_inner, idx))
        if self.extra_blocks is not None:
            results, names = self.extra_blocks(results, feats, names)
        return OrderedDict(zip(names, results))
