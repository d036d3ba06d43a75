"""Dense heads of UP's improved RetinaNet: two conv towers (classification, box) run on every
pyramid level, then 3x3 prediction convs; optionally a third prediction conv, the IoU branch,
on the box tower (one logit per anchor: the predicted IoU of the anchor's decoded box).

Tower layouts (``norm_per_level``):

- False (UP's ``RetinaSubNet`` / ``RetinaHeadWithIOU``): one tower for all levels; without a
  norm each conv has a bias, with one (``gn``, ...) each conv is bias-free and followed by it;
- True (UP's ``RetinaHeadWithBN`` / ``RetinaHeadWithBNIOU``): the conv weights are shared by
  all levels but every level has its own norm layers (BatchNorm statistics differ per scale);
  with ``share_level_convs=False`` (UP's ``RetinaHeadWithBNSep``, its quantization head) every
  level has its own convs too: nothing of the towers is shared, only the prediction convs. A
  conv that serves one level only keeps one set of activation ranges when quantized.

Modules carry UP's names (``cls_subnet``, ``box_subnet``, ``cls_subnet_pred``,
``box_subnet_pred``, ``iou_pred``) so UP-trained weights load by name.
"""
import math

from torch import nn


def _shared_tower(num_conv, in_ch, ch, norm):
    layers = []
    for _ in range(num_conv):
        layers.append(nn.Conv2d(in_ch, ch, 3, 1, 1, bias=norm is None))
        if norm is not None:
            layers.append(norm(ch))
        layers.append(nn.ReLU(inplace=True))
        in_ch = ch
    return nn.Sequential(*layers)


def _per_level_tower(num_conv, num_levels, in_ch, ch, norm, share_convs=True):
    def convs():
        return [nn.Conv2d(in_ch if i == 0 else ch, ch, 3, 1, 1, bias=False) for i in range(num_conv)]

    shared = convs() if share_convs else None
    return nn.ModuleList(nn.Sequential(*(nn.Sequential(conv, norm(ch), nn.ReLU(inplace=True))
                                         for conv in (shared or convs())))
                         for _ in range(num_levels))


class FocalHeadInit:
    """The dense heads' initialisation (RetinaPlusHead, BigNAS's head): ``cls_subnet_pred``'s
    bias at the focal prior."""

    def init_weights(self, std=0.01, prior=0.01):
        """Convs N(0, std) with zero bias, norms (1, 0), the class bias at the prior (focal init)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, std=std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight), nn.init.zeros_(m.bias)
        self.init_prior(prior)

    def init_prior(self, prior):
        nn.init.constant_(self.cls_subnet_pred.bias, -math.log((1 - prior) / prior))


class RetinaPlusHead(FocalHeadInit, nn.Module):
    """forward(features) -> per level (cls [N, A*C, H, W], loc [N, A*4, H, W][, iou [N, A, H, W]]).

    ``num_classes``: foreground classes (sigmoid, no background channel). ``norm``: a factory
    taking a channel count (``nn.BatchNorm2d``, ``partial(nn.GroupNorm, 32)``) or None.
    """

    def __init__(self, in_channels, num_classes, num_anchors, num_levels, feat_channels=256, num_conv=4,
                 norm=None, norm_per_level=False, iou_branch=False, prior=0.01, share_level_convs=True):
        super().__init__()
        if norm_per_level and norm is None:
            raise ValueError("norm_per_level needs a norm")
        if not share_level_convs and not norm_per_level:
            raise ValueError("convs of their own per level go with norm_per_level")
        self.num_classes, self.num_anchors, self.num_levels = num_classes, num_anchors, num_levels
        self.norm_per_level, self.iou_branch = norm_per_level, iou_branch
        if norm_per_level:
            tower = (num_conv, num_levels, in_channels, feat_channels, norm, share_level_convs)
            self.cls_subnet, self.box_subnet = _per_level_tower(*tower), _per_level_tower(*tower)
        else:
            self.cls_subnet = _shared_tower(num_conv, in_channels, feat_channels, norm)
            self.box_subnet = _shared_tower(num_conv, in_channels, feat_channels, norm)
        self.cls_subnet_pred = nn.Conv2d(feat_channels, num_anchors * num_classes, 3, 1, 1)
        self.box_subnet_pred = nn.Conv2d(feat_channels, num_anchors * 4, 3, 1, 1)
        if iou_branch:
            self.iou_pred = nn.Conv2d(feat_channels, num_anchors, 3, 1, 1)
        self.init_weights(0.01, prior)

    def forward(self, features):
        if len(features) != self.num_levels:
            raise ValueError(f"the head was built for {self.num_levels} levels, got {len(features)}")
        out = []
        for level, x in enumerate(features):
            cls_tower = self.cls_subnet[level] if self.norm_per_level else self.cls_subnet
            box_tower = self.box_subnet[level] if self.norm_per_level else self.box_subnet
            box_feat = box_tower(x)
            preds = (self.cls_subnet_pred(cls_tower(x)), self.box_subnet_pred(box_feat))
            out.append(preds + (self.iou_pred(box_feat),) if self.iou_branch else preds)
        return out
