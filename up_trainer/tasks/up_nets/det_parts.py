"""torchvision detection pieces bent to UP's rules where UP's files set them: UP's anchors,
UP's max-IoU matcher, UP's extra pyramid levels, focal and L1 losses normalised by the batch's
positive count, RetinaNet over foreground classes only, and no resize or normalisation inside
the detector (UP's data pipeline does both)."""
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.retinanet import (RetinaNet, RetinaNetClassificationHead,
                                                    RetinaNetRegressionHead)
from torchvision.models.detection.transform import GeneralizedRCNNTransform
from torchvision.ops import sigmoid_focal_loss

from ..det.pyramid_levels import ExtraLevels as UPExtraLevels  # noqa: F401  (the UP readers' name)
from ..det.pyramid_levels import cell_anchors as up_cell_anchors


class UPAnchorGenerator(AnchorGenerator):
    """torchvision's generator with UP's cell anchors, spread at UP's nominal strides (not the
    padded-image / feature-map ratio torchvision measures)."""

    def __init__(self, strides, ratios, scales):
        super().__init__(sizes=tuple(tuple(scales) for _ in strides),
                         aspect_ratios=tuple(tuple(ratios) for _ in strides))
        self.up_strides = list(strides)
        with torch.device("cpu"):
            self.cell_anchors = [up_cell_anchors(s, ratios, scales) for s in strides]

    def grid_anchors(self, grid_sizes, strides):
        device = self.cell_anchors[0].device
        nominal = [[torch.tensor(s, device=device), torch.tensor(s, device=device)] for s in self.up_strides]
        return super().grid_anchors(grid_sizes, nominal)


class UPMatcher(nn.Module):
    """UP's ``max_iou`` matcher: negative below ``neg``, positive above ``pos`` (strictly),
    ignored between; with ``low_quality``, every anchor within 1e-3 of a box's best IoU (and
    above ``low_thresh``) is positive too. Returns torchvision's codes (-1 negative, -2
    ignored) so torchvision's heads consume it."""

    BELOW_LOW_THRESHOLD, BETWEEN_THRESHOLDS = -1, -2

    def __init__(self, pos, neg, low_quality, low_thresh=0.0):
        super().__init__()
        self.pos, self.neg, self.low_quality, self.low_thresh = pos, neg, low_quality, low_thresh

    def forward(self, iou):  # iou: gt x anchors
        if iou.numel() == 0:
            raise ValueError("no ground-truth boxes or no anchors to match")
        best, matches = iou.max(dim=0)
        out = torch.full_like(matches, self.BETWEEN_THRESHOLDS)
        out[best < self.neg] = self.BELOW_LOW_THRESHOLD
        positive = best > self.pos
        out[positive] = matches[positive]
        if self.low_quality:
            near = iou >= iou.max(dim=1, keepdim=True).values - 1e-3
            if self.low_thresh > 0:
                near &= iou > self.low_thresh
            extra = near.any(dim=0)
            out[extra] = matches[extra]
        return out


def _positives(matched_idxs):
    return max(1, int(sum(int((m >= 0).sum()) for m in matched_idxs)))


class FocalHead(RetinaNetClassificationHead):
    """Sigmoid focal loss with UP's alpha, gamma and weight over the foreground classes
    (channel k is class k + 1: UP's RetinaNet has no background channel), summed over the
    batch and divided by the batch's positive anchors."""

    def __init__(self, in_channels, num_anchors, num_classes, prior, alpha, gamma, weight):
        super().__init__(in_channels, num_anchors, num_classes, prior_probability=prior)
        self.alpha, self.gamma, self.weight = alpha, gamma, weight

    def compute_loss(self, targets, head_outputs, matched_idxs):
        total = 0.0
        for target, logits, matched in zip(targets, head_outputs["cls_logits"], matched_idxs):
            fg = matched >= 0
            want = torch.zeros_like(logits)
            want[fg, target["labels"][matched[fg]] - 1] = 1.0
            valid = matched != self.BETWEEN_THRESHOLDS
            total = total + sigmoid_focal_loss(logits[valid], want[valid], self.alpha, self.gamma, reduction="sum")
        return self.weight * total / _positives(matched_idxs)


class L1BoxHead(RetinaNetRegressionHead):
    """L1 on the encoded box deltas of positive anchors, divided by the batch's positives."""

    def __init__(self, in_channels, num_anchors, weight):
        super().__init__(in_channels, num_anchors)
        self.weight = weight

    def compute_loss(self, targets, head_outputs, anchors, matched_idxs):
        total = 0.0
        for target, deltas, anchors_i, matched in zip(targets, head_outputs["bbox_regression"], anchors, matched_idxs):
            fg = torch.where(matched >= 0)[0]
            if fg.numel():
                wanted = self.box_coder.encode_single(target["boxes"][matched[fg]], anchors_i[fg])
                total = total + F.l1_loss(deltas[fg], wanted, reduction="sum")
        return self.weight * total / _positives(matched_idxs)


class ForegroundRetinaNet(RetinaNet):
    """RetinaNet whose class channels are the foreground classes only; labels out are 1..C."""

    def postprocess_detections(self, head_outputs, anchors, image_shapes):
        detections = super().postprocess_detections(head_outputs, anchors, image_shapes)
        for d in detections:
            d["labels"] = d["labels"] + 1
        return detections


class PreparedTransform(GeneralizedRCNNTransform):
    """Batches images as they come: UP's transforms already resized and normalised them."""

    def normalize(self, image):
        return image

    def resize(self, image, target=None):
        return image, target


def prepared_transform(size_divisible=32):
    return PreparedTransform(1, 1, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], size_divisible=size_divisible)
