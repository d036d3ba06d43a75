"""YOLOv5's targets and losses as UP's ``yolov5_post`` computes them.

Targets (UP's ``yolov5`` supervisor): per level, a ground-truth box goes to every anchor whose
width and height ratios to it are within ``anchor_thresh`` (4), in the cell holding its centre
and in the two neighbouring cells whose sides its centre is nearest to (``pick_bias`` 0.5), the
box written as (centre offset from the cell's corner, width, height) in cells. Losses per level:
CIoU loss over the assigned cells (mean), BCE objectness against the detached CIoU of the
assigned cells (0 elsewhere; mean over all cells, times the level's ``obj_loss_layer_weights``)
and BCE classes over the assigned cells (mean); each summed over levels and multiplied by its
``loss_weights`` entry x the batch size x the process count (UP's scaling, which its lr per
image undoes).
"""
import math

import torch
import torch.nn.functional as F

from ..box_ops import IOU_EPS

NEIGHBOURS = ((0, 0), (1, 0), (0, 1), (-1, 0), (0, -1))  # the centre cell, then left, top, right, bottom


def ciou(a, b, eps=IOU_EPS):
    """Complete IoU of paired xyxy boxes: IoU - centre distance^2 / enclosing diagonal^2 - alpha v."""
    w1, h1 = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    w2, h2 = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    inter = (torch.min(a[:, 2], b[:, 2]) - torch.max(a[:, 0], b[:, 0])).clamp(0) * \
        (torch.min(a[:, 3], b[:, 3]) - torch.max(a[:, 1], b[:, 1])).clamp(0)
    iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
    cw = torch.max(a[:, 2], b[:, 2]) - torch.min(a[:, 0], b[:, 0])
    ch = torch.max(a[:, 3], b[:, 3]) - torch.min(a[:, 1], b[:, 1])
    rho2 = ((b[:, 0] + b[:, 2] - a[:, 0] - a[:, 2]) ** 2 + (b[:, 1] + b[:, 3] - a[:, 1] - a[:, 3]) ** 2) / 4
    v = (4 / math.pi ** 2) * (torch.atan(w2 / (h2 + eps)) - torch.atan(w1 / (h1 + eps))) ** 2
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / (cw ** 2 + ch ** 2 + eps) + v * alpha)


def xywh_to_xyxy(b):
    return torch.cat((b[..., :2] - b[..., 2:] / 2, b[..., :2] + b[..., 2:] / 2), -1)


def level_targets(boxes_per_image, labels_per_image, anchors, stride, h, w, num_classes, anchor_thresh=4.0,
                  pick_bias=0.5):
    """(box_gt [N, A, h, w, 4] in cells, cls_gt [N, A, h, w, C], mask [N, A, h, w]) of one level;
    ``anchors`` [A, 2] in pixels, boxes xyxy in the padded batch's pixels, labels 1..C."""
    n, a = len(boxes_per_image), anchors.shape[0]
    device = anchors.device
    box_gt = anchors.new_zeros((n, a, h, w, 4))
    cls_gt = anchors.new_zeros((n, a, h, w, num_classes))
    mask = anchors.new_zeros((n, a, h, w))
    rows = []
    for i, (boxes, labels) in enumerate(zip(boxes_per_image, labels_per_image)):
        if len(boxes):
            xy = (boxes[:, :2] + boxes[:, 2:]) / 2 / stride
            wh = (boxes[:, 2:] - boxes[:, :2]) / stride
            rows.append(torch.cat((xy, wh, (labels - 1).float()[:, None], torch.full_like(xy[:, :1], i)), 1))
    if not rows:
        return box_gt, cls_gt, mask
    gt = torch.cat(rows)
    cell_anchors = anchors / stride
    expanded = torch.cat((gt[None].expand(a, -1, -1), torch.arange(a, device=device, dtype=gt.dtype)[:, None, None]
                          .expand(-1, gt.shape[0], 1)), 2)  # [A, G, 7]: x y w h cls image anchor
    ratio = expanded[..., 2:4] / cell_anchors[:, None]
    kept = expanded[torch.max(ratio, 1.0 / ratio).max(2)[0] < anchor_thresh]
    if not kept.shape[0]:
        return box_gt, cls_gt, mask
    xy = kept[:, :2]
    inverse = torch.tensor([w, h], device=device, dtype=xy.dtype) - xy
    left, top = ((xy % 1.0 < pick_bias) & (xy > 1.0)).T
    right, bottom = ((inverse % 1.0 < pick_bias) & (inverse > 1.0)).T
    take = torch.stack((torch.ones_like(left), left, top, right, bottom))
    kept = kept[None].expand(5, -1, -1)[take]
    shifts = torch.tensor(NEIGHBOURS, device=device, dtype=xy.dtype)[:, None] * pick_bias
    offsets = shifts.expand(-1, xy.shape[0], -1)[take]
    xy = kept[:, :2]
    ij = (xy - offsets).long()
    gi, gj = ij[:, 0].clamp(0, w - 1), ij[:, 1].clamp(0, h - 1)
    c, b, anc = kept[:, 4].long(), kept[:, 5].long(), kept[:, 6].long()
    box_gt[b, anc, gj, gi] = torch.cat((xy - ij, kept[:, 2:4]), 1)
    cls_gt[b, anc, gj, gi] = F.one_hot(c, num_classes).to(cls_gt.dtype)
    mask[b, anc, gj, gi] = 1.0
    return box_gt, cls_gt, mask


class YoloV5Criterion:
    """losses({loss_box, loss_obj, loss_cls}) of the permuted per-level predictions."""

    def __init__(self, num_classes, anchors, strides, loss_weights=(0.05, 1.0, 0.5),
                 obj_layer_weights=(4.0, 1.0, 0.4)):
        self.num_classes, self.anchors, self.strides = num_classes, anchors, list(strides)
        scale = 3 / len(self.strides)
        self.weights = [w * scale for w in loss_weights]
        if len(self.strides) >= 4:
            self.weights[1] *= 1.4
        self.obj_layer_weights = list(obj_layer_weights)

    def __call__(self, levels, targets, world_size=1):
        boxes = [t["boxes"] for t in targets]
        labels = [t["labels"] for t in targets]
        lbox = lobj = lcls = levels[0][0].new_zeros(())
        for lvl, (loc, cls, obj) in enumerate(levels):
            n, a, h, w, _ = loc.shape
            anchors = self.anchors[lvl].to(loc)
            box_gt, cls_gt, mask = level_targets(boxes, labels, anchors, self.strides[lvl], h, w, self.num_classes)
            xy = loc[..., :2].sigmoid() * 2 - 0.5
            wh = (loc[..., 2:].sigmoid() * 2) ** 2 * (anchors / self.strides[lvl]).view(1, a, 1, 1, 2)
            pos = mask.reshape(-1) > 0
            pred = torch.cat((xy, wh), -1).reshape(-1, 4)
            if bool(pos.any()):
                quality = ciou(xywh_to_xyxy(pred[pos]), xywh_to_xyxy(box_gt.reshape(-1, 4)[pos]))
                lbox = lbox + (1 - quality).mean()
                lcls = lcls + F.binary_cross_entropy_with_logits(cls.reshape(-1, self.num_classes)[pos],
                                                                 cls_gt.reshape(-1, self.num_classes)[pos])
                obj_gt = mask.new_zeros(mask.numel())
                obj_gt[pos] = quality.detach().clamp(0).to(obj_gt.dtype)
            else:
                obj_gt = mask.new_zeros(mask.numel())
            lobj = lobj + F.binary_cross_entropy_with_logits(obj.reshape(-1), obj_gt) * self.obj_layer_weights[lvl]
        scale = len(targets) * world_size
        return {"loss_box": lbox * self.weights[0] * scale, "loss_obj": lobj * self.weights[1] * scale,
                "loss_cls": lcls * self.weights[2] * scale}
