"""OneNet's losses on the matched anchors, as UP's ``onenet_post``.

- class: ``cls_loss(logits [M, C], labels [M] 0..C, quality [M])`` summed over every anchor
  (background included), labels 1..C on the matched anchors; with ``use_qfl`` the quality of a
  matched anchor is the IoU of its (detached) box with its target box (QFL's soft target), else
  1; times ``cls_weight``;
- box: (1 - GIoU) of the matched boxes, times ``giou_weight``;
- L1: |box - target| / (w, h, w, h) of the image, summed, times ``l1_weight``;
each divided by the number of ground-truth boxes in the batch (averaged over processes with
``all_reduce_norm``, at least 1). Keys ``loss_cls``, ``loss_loc``, ``loss_l1``.
"""
import torch
import torch.nn.functional as F
from torchvision.ops import generalized_box_iou_loss

from ..box_ops import mean_over_processes, paired_iou


def sigmoid_focal_sum(logits, labels, quality=None, alpha=0.25, gamma=2.0):
    """Summed sigmoid focal loss with one-hot targets (labels 0 = background, 1..C)."""
    target = torch.zeros_like(logits)
    pos = (labels > 0).nonzero()[:, 0]
    target[pos, labels[pos] - 1] = 1.0
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    p_t = p * target + (1 - p) * (1 - target)
    a_t = alpha * target + (1 - alpha) * (1 - target) if alpha >= 0 else 1.0
    return (a_t * (1 - p_t) ** gamma * ce).sum()


class OneNetCriterion:
    def __init__(self, box_coder, matcher, cls_loss, use_qfl=False, cls_weight=1.0, giou_weight=1.0,
                 l1_weight=5.0, all_reduce_norm=True):
        self.box_coder, self.matcher, self.cls_loss = box_coder, matcher, cls_loss
        self.use_qfl, self.all_reduce_norm = use_qfl, all_reduce_norm
        self.cls_weight, self.giou_weight, self.l1_weight = cls_weight, giou_weight, l1_weight

    def decode(self, deltas, anchors):
        """[N, K, 4] boxes from deltas and the anchors of every level."""
        flat = torch.cat(anchors)
        return torch.stack([self.box_coder.decode_single(d, flat) for d in deltas])

    def __call__(self, outputs, anchors_per_level, targets, image_sizes):
        logits, boxes = outputs["cls"], self.decode(outputs["deltas"], anchors_per_level)
        n, k, _ = logits.shape
        labels = torch.zeros(n, k, dtype=torch.int64, device=logits.device)
        quality = torch.zeros(n, k, dtype=logits.dtype, device=logits.device)
        matched, goals, scales = [], [], []
        for i, (t, (h, w)) in enumerate(zip(targets, image_sizes)):
            gt_boxes, gt_labels = t["boxes"].to(boxes), t["labels"].to(labels)
            whwh = boxes.new_tensor([w, h, w, h])
            idx = self.matcher(logits[i].detach(), boxes[i].detach(), gt_labels, gt_boxes, whwh)
            labels[i, idx] = gt_labels
            matched.append(boxes[i, idx]), goals.append(gt_boxes), scales.append(whwh.expand(len(idx), 4))
            if self.use_qfl and len(idx):
                quality[i, idx] = paired_iou(boxes[i, idx].detach(), gt_boxes).to(quality.dtype)
            elif len(idx):
                quality[i, idx] = 1.0
        pred, goal, scale = torch.cat(matched), torch.cat(goals), torch.cat(scales)
        count = torch.tensor(float(len(goal)), device=logits.device)
        norm = mean_over_processes(count) if self.all_reduce_norm else max(float(count), 1.0)
        loss_cls = self.cls_loss(logits.reshape(n * k, -1), labels.reshape(-1), quality.reshape(-1)) / norm
        if len(goal):
            loss_loc = generalized_box_iou_loss(pred, goal, reduction="sum") / norm
            loss_l1 = ((pred - goal).abs() / scale).sum() / norm
        else:  # no box in the batch: zero losses that still reach the box branch
            loss_loc = loss_l1 = outputs["deltas"].sum() * 0.0
        return {"loss_cls": loss_cls * self.cls_weight, "loss_loc": loss_loc * self.giou_weight,
                "loss_l1": loss_l1 * self.l1_weight}
