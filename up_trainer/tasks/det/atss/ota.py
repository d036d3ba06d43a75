"""SimOTA over anchors: UP's ``retina_ota`` supervisor with ``use_SimOTA: true``.

YOLOX's dynamic-k assignment (:class:`up_trainer.tasks.det.yolox.SimOTAAssigner`) with each
anchor as a point: the cost of (box, anchor) is the BCE of the anchor's class sigmoids against
the box's one-hot class, plus 3 x -log(IoU of the anchor's decoded prediction with the box),
plus a large cost unless the point lies inside both the box and its centre region (2.5 strides
around the box centre, clamped to the image); each box takes its k cheapest anchors, k = the
sum of its 10 best IoUs. As in UP, an anchor's point is its centre shifted by half a stride
right and down.
"""
import torch
from torchvision.ops import box_convert

from ..simota import SimOTAAssigner
from ..anchor_assign import NEGATIVE


class RetinaSimOTAAssigner:
    """``assign(anchors_per_level, gt_boxes, image_size, gt_labels=, cls_logits=, pred_boxes=)``
    -> the matched box index of every anchor, ``NEGATIVE`` (-1) for background."""

    needs_predictions = True

    def __init__(self, strides, center_radius=2.5, candidate_k=10):
        self.strides = list(strides)
        self.simota = SimOTAAssigner(center_radius=center_radius, candidate_k=candidate_k)

    @torch.no_grad()
    def assign(self, anchors_per_level, gt_boxes, image_size=None, gt_labels=None, cls_logits=None,
               pred_boxes=None):
        anchors = torch.cat(list(anchors_per_level))
        matched = torch.full((anchors.shape[0],), NEGATIVE, dtype=torch.long, device=anchors.device)
        keep = ((gt_boxes[:, 2] > gt_boxes[:, 0]) & (gt_boxes[:, 3] > gt_boxes[:, 1])).nonzero()[:, 0]
        if keep.numel() == 0:
            return matched
        strides = torch.cat([anchors.new_full((a.shape[0],), float(s))
                             for a, s in zip(anchors_per_level, self.strides)])
        points = (anchors[:, :2] + anchors[:, 2:]) / 2 + 0.5 * strides[:, None]
        found = self.simota.assign(points, strides, cls_logits, box_convert(pred_boxes, "xyxy", "cxcywh"), None,
                                   gt_boxes[keep].to(anchors.dtype), gt_labels[keep], image_size)
        matched[found.fg_mask] = keep[found.matched_gt]
        return matched
