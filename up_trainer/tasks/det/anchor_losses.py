"""The improved RetinaNet's losses: Quality Focal Loss, GIoU (+ L1) on the positives' boxes,
and the IoU branch, over anchors assigned by :class:`.anchor_assign.ATSSAssigner`.

- Quality Focal Loss (Li et al. 2020, "Generalized Focal Loss"): sigmoid binary cross-entropy
  of every (anchor, class) logit against a soft target (the IoU of the positive's decoded box
  with its ground truth at its class, 0 elsewhere), each term scaled by |target - sigma|^beta.
  Summed and divided by the positive count.
- Localisation: 1 - GIoU between decoded predicted and ground-truth boxes; with the IoU branch
  each positive is weighted by its IoU target and the sum divided by the sum of those targets
  (at least 1), as UP's ``retina_post_iou`` does; without it divided by the positive count.
  ``compose_loc_loss`` adds an L1 term: UP applies it to the encoded offsets (dx, dy, dw, dh)
  of the positives, averaged over their elements (UP's compose passes it no normaliser).
- IoU branch: binary cross-entropy of the predicted IoU logit of each positive against the IoU
  of its decoded (detached) box with its ground truth; summed over positives, divided by
  their count.
Counts are averaged over data-parallel processes, as UP does, so every process divides by the
same number.
"""
import torch
import torch.nn.functional as F
from torchvision.ops import generalized_box_iou_loss

from .box_ops import mean_over_processes, paired_iou, quality_focal_loss
from .anchor_assign import ATSSAssigner

LOSS_KEYS = ("loss_cls", "loss_loc", "loss_iou")


def dynamic_normalizer(logits, labels, gamma, alpha=0.5):
    """UP's QFL ``dynamic_normalizer``: the class loss is divided by how much focal weight the
    batch carries, alpha * sum((1 - p_pos)^gamma) + (1 - alpha) * sum(p_neg^gamma) over the
    valid anchors (p: detached sigmoid scores; negatives: every class score but the positives'
    own), at least 1, instead of by the positive count."""
    p = logits.detach().float().sigmoid()
    valid = labels >= 0
    pos = (labels > 0).nonzero()[:, 0]
    p_pos = p[pos, labels[pos] - 1]
    pos_part = (1 - p_pos).pow(gamma).sum()
    neg_part = p[valid].pow(gamma).sum() - p_pos.pow(gamma).sum()
    return (alpha * pos_part + (1 - alpha) * neg_part).clamp(min=1)


class RetinaPlusCriterion:
    """Losses of one batch (anchors assigned by ATSS, or by ``assigner``). ``outputs``: cls
    [N, A, C], deltas [N, A, 4] and, with the IoU branch, iou [N, A] (logits);
    ``anchors_per_level``: [A_l, 4] each; ``targets``: list of {boxes xyxy, labels 1..C};
    ``image_sizes``: [(h, w)]. Returns {loss_cls, loss_loc[, loss_iou]}."""

    def __init__(self, box_coder, top_k=9, beta=2.0, cls_weight=1.0, giou_weight=1.0, l1_weight=0.0,
                 iou_branch=False, iou_branch_weight=1.0, assigner=None, cls_loss=None, dynamic_norm=False):
        """``cls_loss``: a module taking (logits [K, C], labels [K], IoU targets [K]) and returning
        the summed class loss (:class:`.efl.EqualizedFocalLoss`) in place of QFL.
        ``dynamic_norm``: QFL divided by :func:`dynamic_normalizer` instead of the positive count."""
        self.dynamic_norm = dynamic_norm
        self.box_coder, self.assigner = box_coder, assigner or ATSSAssigner(top_k)
        self.cls_loss = cls_loss
        self.beta, self.cls_weight, self.giou_weight, self.l1_weight = beta, cls_weight, giou_weight, l1_weight
        self.iou_branch, self.iou_branch_weight = iou_branch, iou_branch_weight

    def __call__(self, outputs, anchors_per_level, targets, image_sizes):
        anchors = torch.cat(list(anchors_per_level))
        cls, deltas = outputs["cls"], outputs["deltas"]
        labels, pos_img, pos_anchor, pos_boxes = [], [], [], []
        for i, (target, size) in enumerate(zip(targets, image_sizes)):
            if getattr(self.assigner, "needs_predictions", False):  # SimOTA: costs from the predictions
                boxes = self.box_coder.decode_single(deltas[i].detach(), anchors)
                matched = self.assigner.assign(anchors_per_level, target["boxes"], size, gt_labels=target["labels"],
                                               cls_logits=cls[i].detach(), pred_boxes=boxes)
            else:
                matched = self.assigner.assign(anchors_per_level, target["boxes"], size)
            lab = torch.zeros_like(matched)
            hit = (matched >= 0).nonzero()[:, 0]
            lab[hit] = target["labels"][matched[hit]].long()
            labels.append(lab)
            pos_img.append(torch.full_like(hit, i))
            pos_anchor.append(hit)
            pos_boxes.append(target["boxes"][matched[hit]].to(deltas.dtype))
        labels = torch.stack(labels)
        pos_img, pos_anchor, pos_boxes = torch.cat(pos_img), torch.cat(pos_anchor), torch.cat(pos_boxes)
        # on the outputs' device: NCCL reduces CUDA tensors only
        num_pos = mean_over_processes(torch.tensor(float(pos_anchor.numel()), device=deltas.device))

        pos_deltas = deltas[pos_img, pos_anchor]
        pred_boxes = self.box_coder.decode_single(pos_deltas, anchors[pos_anchor])
        quality = paired_iou(pred_boxes.detach(), pos_boxes)  # the soft class target and the IoU target
        scores = torch.zeros(labels.shape, dtype=cls.dtype, device=cls.device)
        scores[pos_img, pos_anchor] = quality
        if self.cls_loss is not None:
            loss_cls = self.cls_loss(cls.flatten(0, 1), labels.flatten(), scores.flatten()) / num_pos
        else:
            normalizer = dynamic_normalizer(cls.flatten(0, 1), labels.flatten(), self.beta) if self.dynamic_norm \
                else num_pos
            loss_cls = quality_focal_loss(cls.flatten(0, 1), labels.flatten(), scores.flatten(), self.beta) / normalizer

        zero = deltas.sum() * 0.0
        if pos_anchor.numel() == 0:
            loss_loc = zero
        else:
            giou = generalized_box_iou_loss(pred_boxes, pos_boxes, reduction="none")
            if self.iou_branch:
                loss_loc = (giou * quality).sum() / mean_over_processes(quality.sum())
            else:
                loss_loc = giou.sum() / num_pos
            loss_loc = self.giou_weight * loss_loc
            if self.l1_weight:
                wanted = self.box_coder.encode_single(pos_boxes, anchors[pos_anchor])
                loss_loc = loss_loc + self.l1_weight * F.l1_loss(pos_deltas, wanted)
        losses = {"loss_cls": self.cls_weight * loss_cls, "loss_loc": loss_loc}
        if self.iou_branch:
            iou_logits = outputs["iou"][pos_img, pos_anchor]
            loss_iou = F.binary_cross_entropy_with_logits(iou_logits, quality, reduction="sum") / num_pos \
                if pos_anchor.numel() else outputs["iou"].sum() * 0.0
            losses["loss_iou"] = self.iou_branch_weight * loss_iou
        return losses


__all__ = ["LOSS_KEYS", "RetinaPlusCriterion", "quality_focal_loss"]
