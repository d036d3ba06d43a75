"""OneNet's minimum-cost matching (UP's ``onenet`` matcher, ``easy_match: true``).

cost[k, g] = cost_cls * (focal cost of anchor k predicting box g's class)
           + cost_l1 * |corners_k - corners_g|_1 on corners divided by the image's (w, h, w, h)
           - cost_giou * GIoU(box_k, box_g)
with the focal cost alpha (1 - p)^gamma (-log p) - (1 - alpha) p^gamma (-log(1 - p)), p the
sigmoid score. Each box takes its cheapest anchor; two boxes may take the same anchor (as in
UP, the later box's class is then that anchor's target).
"""
import torch
from torchvision.ops import generalized_box_iou


class OneNetMatcher:
    def __init__(self, cost_cls, cost_l1, cost_giou, alpha=0.25, gamma=2.0):
        self.cost_cls, self.cost_l1, self.cost_giou = cost_cls, cost_l1, cost_giou
        self.alpha, self.gamma = alpha, gamma

    @torch.no_grad()
    def cost(self, logits, boxes, labels, gt_boxes, whwh):
        """[K, G] cost of anchors (logits [K, C], decoded boxes [K, 4]) for boxes (labels 1..C)."""
        p = logits.sigmoid()[:, labels - 1]
        pos = self.alpha * (1 - p) ** self.gamma * -(p + 1e-8).log()
        neg = (1 - self.alpha) * p ** self.gamma * -(1 - p + 1e-8).log()
        l1 = torch.cdist(boxes / whwh, gt_boxes / whwh, p=1)
        # an inverted prediction scores as an empty box at the origin (UP zeroes it for this cost)
        bad = (boxes[:, 2:] < boxes[:, :2]).any(dim=1)
        boxes = torch.where(bad[:, None], torch.zeros_like(boxes), boxes)
        giou = generalized_box_iou(boxes, gt_boxes)
        return self.cost_cls * (pos - neg) + self.cost_l1 * l1 - self.cost_giou * giou

    def __call__(self, logits, boxes, labels, gt_boxes, whwh):
        """The anchor index [G] each box takes."""
        if len(labels) == 0:
            return torch.zeros(0, dtype=torch.int64, device=logits.device)
        return self.cost(logits, boxes, labels, gt_boxes, whwh).argmin(dim=0)
