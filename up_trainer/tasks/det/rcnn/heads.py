"""The box nets of UP's two-stage heads, each ``(features dict, rois per image, image sizes)
-> (class logits [R, C+1], deltas [R, 4] or [R, 4 (C+1)])``, with UP's parameter names.

* :class:`Res5Head` (UP's BboxRes5): RoIAlign on the stride-16 C4 map, ResNet stage 5 (its
  first block's stride ``pool_size // 7``), a global average, linear class and box layers.
* :class:`FCHead` (one stage of UP's CascadeFC, UP's BboxFC): multi-level RoIAlign, two
  ReLU fully connected layers, linear class and box layers.
* :class:`RFCNHead` (UP's BboxRFCN): a 1x1 conv to ``feat_planes``, 1x1 convs to the
  position-sensitive class and box maps (``pool_size``^2 groups), pooled by torchvision's
  ``ps_roi_align`` (bin (i, j) of output channel c reads channel group (i, j) of c) and
  averaged over the bins.
"""
import torch
from torch import nn
from torchvision.ops import MultiScaleRoIAlign, ps_roi_align, roi_align


def _outputs(feat, classes, agnostic):
    cls = nn.Linear(feat, classes)
    loc = nn.Linear(feat, 4 if agnostic else 4 * classes)
    _init_outputs(cls, loc)
    return cls, loc


def _init_outputs(cls, loc):
    """UP's start of the class and box layers: N(0, 0.01) and N(0, 0.001), zero biases."""
    nn.init.normal_(cls.weight, std=0.01), nn.init.zeros_(cls.bias)
    nn.init.normal_(loc.weight, std=0.001), nn.init.zeros_(loc.bias)


class Res5Head(nn.Module):
    def __init__(self, layer4, out_planes, classes, pool_size=7, stride=16, sampling_ratio=0, agnostic=False):
        super().__init__()
        self.layer4 = layer4
        self.pool_size, self.scale, self.sampling = pool_size, 1.0 / stride, sampling_ratio
        self.fc_cls, self.fc_loc = _outputs(out_planes, classes, agnostic)

    def init_outputs(self):
        _init_outputs(self.fc_cls, self.fc_loc)

    def forward(self, features, rois, sizes):
        x = roi_align(features["0"], rois, self.pool_size, self.scale, self.sampling)
        x = self.layer4(x).mean((2, 3))
        return self.fc_cls(x), self.fc_loc(x)


class FCHead(nn.Module):
    def __init__(self, levels, in_channels, feat_planes, classes, pool_size=7, sampling_ratio=2, agnostic=False):
        super().__init__()
        self.pool = MultiScaleRoIAlign([str(i) for i in levels], pool_size, sampling_ratio)
        self.fc6 = nn.Linear(in_channels * pool_size * pool_size, feat_planes)
        self.fc7 = nn.Linear(feat_planes, feat_planes)
        self.fc_rcnn_cls, self.fc_rcnn_loc = _outputs(feat_planes, classes, agnostic)

    def init_outputs(self):
        _init_outputs(self.fc_rcnn_cls, self.fc_rcnn_loc)

    def forward(self, features, rois, sizes):
        x = self.pool(features, rois, sizes).flatten(1)
        x = torch.relu(self.fc7(torch.relu(self.fc6(x))))
        return self.fc_rcnn_cls(x), self.fc_rcnn_loc(x)


class RFCNHead(nn.Module):
    def __init__(self, in_channels, feat_planes, classes, pool_size=7, stride=16, sampling_ratio=2,
                 agnostic=False, relu_after_feature_conv=False):
        super().__init__()
        ps = pool_size
        self.pool_size, self.scale, self.sampling = pool_size, 1.0 / stride, sampling_ratio
        self.relu_after_feature_conv = relu_after_feature_conv
        self.new_conv = nn.Conv2d(in_channels, feat_planes, 1, bias=False)
        self.rfcn_score = nn.Conv2d(feat_planes, ps * ps * classes, 1)
        self.rfcn_bbox = nn.Conv2d(feat_planes, ps * ps * 4 * (1 if agnostic else classes), 1)

    def forward(self, features, rois, sizes):
        x = self.new_conv(features["0"])
        if self.relu_after_feature_conv:
            x = torch.relu(x)
        pool = (self.pool_size, self.scale, self.sampling)
        rois = [r.float() for r in rois]
        # in float32: torchvision's ps_roi_align has no half-precision kernels (and no autocast rule)
        cls = ps_roi_align(self.rfcn_score(x).float(), rois, *pool).mean((2, 3))
        loc = ps_roi_align(self.rfcn_bbox(x).float(), rois, *pool).mean((2, 3))
        return cls, loc
