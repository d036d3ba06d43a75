"""Adaptive Training Sample Selection (ATSS; Zhang et al. 2020, "Bridging the Gap Between
Anchor-based and Anchor-free Detection").

For each ground-truth box: on every pyramid level, the ``top_k`` anchors whose centres lie
nearest the box centre are candidates; the box's IoU threshold is the mean plus the standard
deviation of its candidates' IoUs; a candidate is positive when its IoU reaches the threshold
and its centre lies inside the box (by more than 0.01 pixel on every side, as UP measures).
An anchor positive for several boxes takes the one it overlaps most. Everything else is
negative (no anchor is ignored).
"""
import torch
from torchvision.ops import box_iou

NEGATIVE = -1
INSIDE_MARGIN = 0.01  # pixels; UP's margin for "the anchor centre lies inside the box"


def _centres(boxes):
    return torch.stack(((boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2), dim=1)


class ATSSAssigner:
    """``assign(anchors_per_level, gt_boxes, image_size)`` -> the matched box index of every
    anchor (levels concatenated in order), ``NEGATIVE`` (-1) for background."""

    def __init__(self, top_k=9):
        if not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
        self.top_k = top_k

    @torch.no_grad()
    def assign(self, anchors_per_level, gt_boxes, image_size=None):
        anchors = torch.cat(list(anchors_per_level))
        matched = torch.full((anchors.shape[0],), NEGATIVE, dtype=torch.long, device=anchors.device)
        valid = (gt_boxes[:, 2] > gt_boxes[:, 0]) & (gt_boxes[:, 3] > gt_boxes[:, 1])
        if not bool(valid.any()):
            return matched
        keep = valid.nonzero()[:, 0]
        boxes = gt_boxes[keep].to(anchors.dtype)
        num_gt = boxes.shape[0]
        ious = box_iou(anchors, boxes)  # [A, G]
        gt_centres = _centres(boxes)
        if image_size is not None:  # a box cut by the image border is measured from its visible centre
            h, w = image_size
            gt_centres = torch.stack((gt_centres[:, 0].clamp(0, w), gt_centres[:, 1].clamp(0, h)), dim=1)
        anchor_centres = _centres(anchors)
        distances = torch.cdist(anchor_centres, gt_centres)  # [A, G]

        candidates, start = [], 0
        for level in anchors_per_level:
            n = level.shape[0]
            k = min(self.top_k, n)
            candidates.append(distances[start:start + n].topk(k, dim=0, largest=False).indices + start)
            start += n
        candidates = torch.cat(candidates)  # [K, G]: anchor indices per box
        columns = torch.arange(num_gt, device=anchors.device)
        cand_ious = ious[candidates, columns]  # [K, G]
        std = cand_ious.std(dim=0) if cand_ious.shape[0] > 1 else torch.zeros_like(cand_ious[0])
        threshold = cand_ious.mean(dim=0) + std
        positive = cand_ious >= threshold[None, :]

        c = anchor_centres[candidates]  # [K, G, 2]
        margins = torch.stack((c[..., 0] - boxes[:, 0], c[..., 1] - boxes[:, 1],
                               boxes[:, 2] - c[..., 0], boxes[:, 3] - c[..., 1]), dim=-1)
        positive &= margins.min(dim=-1).values > INSIDE_MARGIN

        scored = torch.full_like(ious, -1.0)  # IoU where (anchor, box) is a positive pair, else -1
        pos_anchor, pos_gt = candidates[positive], columns.expand_as(candidates)[positive]
        scored[pos_anchor, pos_gt] = ious[pos_anchor, pos_gt]
        best, best_gt = scored.max(dim=1)
        hit = best >= 0
        matched[hit] = keep[best_gt[hit]]
        return matched
