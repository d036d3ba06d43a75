"""UP's max-IoU matching, as the two-stage nets' proposal and box stages use it (and the UP
readers of torchvision's RetinaNet and Faster R-CNN)."""
import torch
from torch import nn


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
