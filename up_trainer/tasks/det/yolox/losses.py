"""YOLOX's losses: SimOTA assigns the points, then

* ``loss_cls``: BCE of the positive points' class logits against one-hot * matched IoU;
* ``loss_obj``: BCE of every point's objectness against "is positive";
* ``loss_iou``: an IoU loss of the positive points' decoded boxes, times ``iou_weight``
  (UP's ``loss_weight``, 5.0);
* ``loss_l1`` (only with ``use_l1``): L1 between the raw box outputs and the targets put in
  the same form (offset in the cell, log of size / stride);

each summed and divided by the number of positive points in the batch (at least 1).
"""
import torch
import torch.nn.functional as F
from torchvision.ops import box_convert, generalized_box_iou_loss

from ....errors import ConfigError
from ..box_ops import mean_over_processes, paired_iou
from ..simota import SimOTAAssigner

IOU_KINDS = ("iou", "linear_iou", "square_iou", "giou")  # UP's loss_type names


def iou_loss(pred, target, kind="square_iou", eps=1e-7):
    """Per-pair box loss [N] for xyxy boxes, UP's kinds: ``iou`` -log IoU (IoU floored at
    ``eps``: a positive that misses its box entirely gets a large finite loss, not inf),
    ``linear_iou`` 1 - IoU, ``square_iou`` 1 - IoU^2 (YOLOX's own), ``giou`` 1 - GIoU."""
    if kind == "giou":
        return generalized_box_iou_loss(pred, target, reduction="none", eps=eps)
    iou = paired_iou(pred, target)
    if kind == "square_iou":
        return 1 - iou ** 2
    if kind == "linear_iou":
        return 1 - iou
    if kind == "iou":
        return -torch.log(iou.clamp(min=eps))
    raise ConfigError("iou_loss", f"{kind!r} is not one of {', '.join(IOU_KINDS)}")


def l1_targets(gt_xyxy, centers, strides, eps=1e-8):
    """The raw box outputs that would decode exactly to ``gt_xyxy`` at these points."""
    cxcywh = box_convert(gt_xyxy, "xyxy", "cxcywh")
    s = strides[:, None]
    corner = centers - 0.5 * s  # the grid position the decode adds the offset to
    return torch.cat(((cxcywh[:, :2] - corner) / s, torch.log(cxcywh[:, 2:] / s + eps)), dim=1)


class YoloxCriterion:
    """Losses for one batch of flattened head outputs; see the module docstring."""

    def __init__(self, num_classes, iou_loss="square_iou", iou_weight=5.0, assigner=None):
        if iou_loss not in IOU_KINDS:
            raise ConfigError("iou_loss", f"{iou_loss!r} is not one of {', '.join(IOU_KINDS)}")
        self.num_classes, self.iou_kind, self.iou_weight = num_classes, iou_loss, iou_weight
        self.assigner = assigner or SimOTAAssigner()

    def __call__(self, outputs, targets, use_l1=False, img_sizes=None):
        """outputs: dict of cls [N, A, C], box [N, A, 4] (decoded cx, cy, w, h), obj [N, A, 1],
        raw_box [N, A, 4], centers [A, 2], strides [A]; targets: per image {boxes xyxy, labels}."""
        cls, box, obj, raw = outputs["cls"], outputs["box"], outputs["obj"], outputs["raw_box"]
        centers, strides = outputs["centers"], outputs["strides"]
        fg_masks, cls_t, box_t, l1_t = [], [], [], []
        for i, t in enumerate(targets):
            gt_boxes = t["boxes"].to(box.device, torch.float32)
            gt_labels = t["labels"].to(box.device)
            a = self.assigner.assign(centers, strides, cls[i].detach(), box[i].detach(), obj[i].detach(),
                                     gt_boxes, gt_labels, None if img_sizes is None else img_sizes[i])
            fg_masks.append(a.fg_mask)
            onehot = F.one_hot(gt_labels[a.matched_gt].long() - 1, self.num_classes).to(cls.dtype)
            cls_t.append(onehot * a.matched_iou[:, None].to(cls.dtype))
            box_t.append(gt_boxes[a.matched_gt])
            if use_l1:
                l1_t.append(l1_targets(gt_boxes[a.matched_gt], centers[a.fg_mask], strides[a.fg_mask]))
        fg = torch.stack(fg_masks)  # [N, A]
        num_fg = mean_over_processes(fg.sum().float())
        obj_t = fg.to(obj.dtype)
        losses = {
            "loss_cls": F.binary_cross_entropy_with_logits(cls[fg], torch.cat(cls_t), reduction="sum") / num_fg,
            "loss_obj": F.binary_cross_entropy_with_logits(obj[..., 0], obj_t, reduction="sum") / num_fg,
            "loss_iou": self.iou_weight * iou_loss(box_convert(box[fg], "cxcywh", "xyxy"), torch.cat(box_t),
                                                   self.iou_kind).sum() / num_fg,
        }
        if use_l1:
            losses["loss_l1"] = F.l1_loss(raw[fg], torch.cat(l1_t), reduction="sum") / num_fg
        return losses
