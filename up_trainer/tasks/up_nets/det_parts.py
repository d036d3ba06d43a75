"""torchvision detection pieces bent to UP's rules where UP's files set them: UP's anchors,
UP's max-IoU matcher, UP's extra pyramid levels, focal and L1 losses normalised by the batch's
positive count, RetinaNet over foreground classes only, and no resize or normalisation inside
the detector (UP's data pipeline does both)."""
import torch
import torch.nn.functional as F
from torchvision.models.detection.retinanet import (RetinaNet, RetinaNetClassificationHead,
                                                    RetinaNetRegressionHead)
from torchvision.models.detection.transform import GeneralizedRCNNTransform
from torchvision.ops import sigmoid_focal_loss

from ..det.pyramid_levels import ExtraLevels as UPExtraLevels  # noqa: F401  (the UP readers' name)
from ..det.pyramid_levels import cell_anchors as up_cell_anchors  # noqa: F401  (the UP readers' name)
from ..det.pyramid_levels import UPAnchorGenerator  # noqa: F401  (the UP readers' name)
from ..det.rcnn.matching import UPMatcher  # noqa: F401  (the UP readers' name)


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
