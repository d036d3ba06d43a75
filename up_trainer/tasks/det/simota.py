"""SimOTA: YOLOX's dynamic-k label assignment, one image at a time.

1. Candidates: points (cell centres) inside a box, or within ``center_radius`` strides of its
   centre, for any box.
2. Cost of (box, candidate): the BCE between sqrt(cls * obj) and the box's one-hot class,
   plus ``iou_weight`` * -log(IoU of the decoded prediction with the box), plus
   ``outside_cost`` unless the point is both inside the box and inside its centre region.
3. Each box takes its k cheapest candidates, k = the sum of its 10 best IoUs (at least
   ``min_k``, YOLOX's 1): a box the predictions already fit well gets more positives.
4. A point taken by several boxes keeps only its cheapest one.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert, box_iou


@dataclass
class Assignment:
    fg_mask: torch.Tensor  # [A] bool: the positive points
    matched_gt: torch.Tensor  # [F] long: the box index of each positive point, in point order
    matched_iou: torch.Tensor  # [F]: IoU of its decoded prediction with that box

    @property
    def num_fg(self):
        return int(self.matched_gt.numel())


class SimOTAAssigner:
    def __init__(self, center_radius=2.5, candidate_k=10, iou_weight=3.0, outside_cost=1e5, min_k=1):
        self.center_radius, self.candidate_k, self.min_k = center_radius, candidate_k, min_k
        self.iou_weight, self.outside_cost = iou_weight, outside_cost

    def candidates(self, centers, strides, gt_boxes, img_size=None):
        """(candidate mask [A], in box and centre region [G, A]) for point centres [A, 2]."""
        x, y = centers[:, 0][None], centers[:, 1][None]
        in_box = ((x > gt_boxes[:, 0:1]) & (x < gt_boxes[:, 2:3]) &
                  (y > gt_boxes[:, 1:2]) & (y < gt_boxes[:, 3:4]))
        cx = (gt_boxes[:, 0] + gt_boxes[:, 2]) / 2
        cy = (gt_boxes[:, 1] + gt_boxes[:, 3]) / 2
        if img_size is not None:  # a box cut by the image edge: its centre region stays inside
            cx, cy = cx.clamp(0, float(img_size[1])), cy.clamp(0, float(img_size[0]))
        r = self.center_radius * strides[None]
        in_center = ((x - cx[:, None]).abs() < r) & ((y - cy[:, None]).abs() < r)
        return (in_box | in_center).any(0), in_box & in_center

    @torch.no_grad()
    def assign(self, centers, strides, cls_logits, boxes, obj_logits, gt_boxes, gt_labels, img_size=None):
        """centers [A, 2] and strides [A] of the points; cls_logits [A, C], boxes [A, 4]
        (decoded cx, cy, w, h), obj_logits [A, 1] or None; gt_boxes [G, 4] xyxy, gt_labels [G] in 1..C."""
        num_points = centers.shape[0]
        empty = Assignment(torch.zeros(num_points, dtype=torch.bool, device=centers.device),
                           torch.zeros(0, dtype=torch.long, device=centers.device), boxes.new_zeros(0))
        if gt_boxes.shape[0] == 0:
            return empty
        cand, in_both = self.candidates(centers, strides, gt_boxes, img_size)
        if not cand.any():
            return empty
        in_both = in_both[:, cand]
        pred_xyxy = box_convert(boxes[cand].float(), "cxcywh", "xyxy")
        ious = box_iou(gt_boxes.float(), pred_xyxy)  # [G, A']
        scores = self.class_scores(cls_logits[cand], None if obj_logits is None else obj_logits[cand])
        onehot = F.one_hot(gt_labels.long() - 1, scores.shape[1]).float()  # [G, C]
        num_gt = gt_boxes.shape[0]
        cls_cost = F.binary_cross_entropy(scores[None].expand(num_gt, -1, -1),
                                          onehot[:, None].expand(-1, scores.shape[0], -1),
                                          reduction="none").sum(-1)
        cost = cls_cost + self.iou_weight * -torch.log(ious + 1e-8) + self.outside_cost * (~in_both)
        matching = self.dynamic_k(cost, ious)
        fg_cand = matching.any(0)
        fg_mask = cand.clone()
        fg_mask[cand] = fg_cand
        matched_gt = matching[:, fg_cand].float().argmax(0)
        matched_iou = ious[:, fg_cand].gather(0, matched_gt[None])[0]
        return Assignment(fg_mask, matched_gt, matched_iou)

    @staticmethod
    def class_scores(cls_logits, obj_logits):
        """The probabilities the cost compares with the one-hot class: sqrt(cls x obj) (YOLOX);
        without objectness logits (UP's RetinaNet OTA) the class sigmoids."""
        if obj_logits is None:
            return cls_logits.float().sigmoid()
        return (cls_logits.float().sigmoid() * obj_logits.float().sigmoid()).sqrt()

    def dynamic_k(self, cost, ious):
        """[G, A'] bool matching: each box its k cheapest candidates, every point at most one box."""
        k_top = min(self.candidate_k, ious.shape[1])
        # while predictions are still random every IoU is small and k is min_k: with YOLOX's 1,
        # about one positive point per box for the first hundreds of updates (see the docs)
        dynamic_ks = ious.topk(k_top, dim=1).values.sum(1).int().clamp(min=self.min_k, max=cost.shape[1])
        matching = torch.zeros_like(cost, dtype=torch.bool)
        for g, k in enumerate(dynamic_ks.tolist()):
            matching[g, cost[g].topk(k, largest=False).indices] = True
        shared = matching.sum(0) > 1
        if shared.any():
            cheapest = cost[:, shared].argmin(0)
            matching[:, shared] = False
            matching[cheapest, shared.nonzero()[:, 0]] = True
        return matching
