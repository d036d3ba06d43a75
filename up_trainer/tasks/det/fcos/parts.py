"""FCOS as UP trains it (Tian et al. 2019, with UP's choices).

* Head: shared cls / box towers of ``num_conv`` conv + norm + ReLU, a class map, a box map
  and a centerness map (from the box tower); per pyramid level a learnable :class:`Scale`,
  and the box map is ``relu(scale * conv)`` (distances, in strides with ``norm_on_bbox``).
* Points: the centre of each cell, ``(j * s + s // 2, i * s + s // 2)``.
* Targets: a point is positive for a box when it lies in the box's centre region (the box
  clipped to ``pos_radius`` strides around its centre) and its largest distance to the box's
  sides lies in the level's ``loc_ranges`` interval; among several boxes, the smallest one
  (area counted UP's way, ``(w + 1) * (h + 1)``).
* Loss: sigmoid focal over foreground classes / positive count; centerness BCE, mean over
  the positives; GIoU of the distance boxes weighted by the centerness target, divided by
  the sum of those targets.
* Score: ``sigmoid(cls) * sigmoid(centerness)``; per level and class the points above
  ``pre_nms_score_thresh``, the ``pre_nms_top_n`` best, then per-class NMS and ``top_n``.
"""
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import batched_nms, generalized_box_iou_loss, sigmoid_focal_loss

INF = 1e10


class Scale(nn.Module):
    """One learnable factor multiplying a level's box output (starts at ``init``)."""

    def __init__(self, init=1.0):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor([float(init)]))

    def forward(self, x):
        return x * self.scale


def _tower(in_ch, planes, norm):
    """conv + norm + ReLU blocks named as UP names them (``conv``, ``gn`` / ``bn``, ``relu``),
    so UP-trained FCOS weights load as they are."""
    layers = []
    for out in planes:
        block = OrderedDict(conv=nn.Conv2d(in_ch, out, 3, 1, 1, bias=norm is None))
        if norm is not None:
            layer = norm(out)
            block["gn" if isinstance(layer, nn.GroupNorm) else "bn"] = layer
        block["relu"] = nn.ReLU(inplace=True)
        layers.append(nn.Sequential(block))
        in_ch = out
    return nn.Sequential(*layers)


class FcosHead(nn.Module):
    """Per level ``(cls logits [N, C, H, W], distances [N, 4, H, W], centerness [N, 1, H, W])``."""

    def __init__(self, in_channels, num_classes, num_levels, feat_planes=256, num_conv=4, norm=None, prior=0.01):
        super().__init__()
        planes = [feat_planes] * num_conv
        self.num_classes = num_classes
        self.cls_subnet = _tower(in_channels, planes, norm)
        self.box_subnet = _tower(in_channels, planes, norm)
        last = planes[-1] if planes else in_channels
        self.cls_subnet_pred = nn.Conv2d(last, num_classes, 3, 1, 1)
        self.box_subnet_pred = nn.Conv2d(last, 4, 3, 1, 1)
        self.centerness = nn.Conv2d(last, 1, 3, 1, 1)
        self.scales = nn.ModuleList(Scale(1.0) for _ in range(num_levels))
        self.prior = prior
        self.init_prior()

    def init_prior(self):
        nn.init.constant_(self.cls_subnet_pred.bias, -math.log((1 - self.prior) / self.prior))

    def forward(self, features):
        out = []
        for level, x in enumerate(features):
            cls_feat, box_feat = self.cls_subnet(x), self.box_subnet(x)
            dist = F.relu(self.scales[level](self.box_subnet_pred(box_feat)))
            out.append((self.cls_subnet_pred(cls_feat), dist, self.centerness(box_feat)))
        return out


def fcos_points(sizes, strides, device=None):
    """Per level the [H*W, 2] (x, y) cell centres of an H x W map of that stride."""
    points = []
    for (h, w), s in zip(sizes, strides):
        ys, xs = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij")
        points.append(torch.stack((xs, ys), -1).reshape(-1, 2).float() * s + s // 2)
    return points


def fcos_targets(points, strides, loc_ranges, boxes, labels, pos_radius=1.5, center_sample=True):
    """(labels [K] with 0 for background, (l, t, r, b) distances [K, 4]) of one image; ``points``
    is the per-level list of :func:`fcos_points`."""
    counts = [len(p) for p in points]
    pts = torch.cat(points)
    k = len(pts)
    if boxes.numel() == 0:
        return labels.new_zeros(k), pts.new_zeros(k, 4)
    ranges = torch.cat([pts.new_tensor(r).expand(n, 2) for r, n in zip(loc_ranges, counts)])
    level_stride = torch.cat([pts.new_full((n,), float(s)) for s, n in zip(strides, counts)])
    x, y = pts[:, :1], pts[:, 1:]
    dist = torch.stack((x - boxes[:, 0], y - boxes[:, 1], boxes[:, 2] - x, boxes[:, 3] - y), -1)  # K x G x 4
    if center_sample:
        cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
        r = level_stride[:, None] * pos_radius
        region = torch.stack((torch.maximum(cx - r, boxes[:, 0]), torch.maximum(cy - r, boxes[:, 1]),
                              torch.minimum(cx + r, boxes[:, 2]), torch.minimum(cy + r, boxes[:, 3])), -1)
        inside = torch.stack((x - region[..., 0], y - region[..., 1], region[..., 2] - x,
                              region[..., 3] - y), -1).min(-1).values > 0
    else:
        inside = dist.min(-1).values > 0
    reach = dist.max(-1).values
    in_range = (reach >= ranges[:, :1]) & (reach <= ranges[:, 1:])
    area = ((boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)).expand(k, -1).clone()
    area[~(inside & in_range)] = INF
    best, which = area.min(1)
    out_labels = labels[which].clone()
    out_labels[best == INF] = 0
    return out_labels, dist[torch.arange(k), which]


def centerness_targets(dist):
    """sqrt(min(l, r) / max(l, r) * min(t, b) / max(t, b)) of [P, 4] (l, t, r, b) distances."""
    lr, tb = dist[:, [0, 2]], dist[:, [1, 3]]
    return torch.sqrt((lr.min(-1).values / lr.max(-1).values) * (tb.min(-1).values / tb.max(-1).values))


def _flat(outputs):
    """Per-level head outputs -> cls [N, K, C], dist [N, K, 4], ctr [N, K], in float32 (the losses
    and targets stay exact under a half-precision autocast)."""
    cls = torch.cat([c.flatten(2).transpose(1, 2) for c, _, _ in outputs], 1).float()
    dist = torch.cat([d.flatten(2).transpose(1, 2) for _, d, _ in outputs], 1).float()
    ctr = torch.cat([t.flatten(1) for _, _, t in outputs], 1).float()
    return cls, dist, ctr


def _distance_boxes(dist):
    """(l, t, r, b) distances as boxes around the origin, the form UP's IoU loss compares."""
    return torch.cat((-dist[:, :2], dist[:, 2:]), -1)


class FcosCriterion:
    """UP's fcos_post losses; ``norm_on_bbox``: distances are learnt in units of the level's stride."""

    def __init__(self, strides, loc_ranges, alpha=0.25, gamma=2.0, pos_radius=1.5, center_sample=True,
                 norm_on_bbox=True, cls_weight=1.0, loc_weight=1.0, center_weight=1.0):
        self.strides, self.loc_ranges = list(strides), [list(r) for r in loc_ranges]
        self.alpha, self.gamma, self.pos_radius, self.center_sample = alpha, gamma, pos_radius, center_sample
        self.norm_on_bbox = norm_on_bbox
        self.cls_weight, self.loc_weight, self.center_weight = cls_weight, loc_weight, center_weight

    def targets(self, points, targets):
        counts = [len(p) for p in points]
        scale = torch.cat([points[0].new_full((n, 1), float(s if self.norm_on_bbox else 1))
                           for s, n in zip(self.strides, counts)])
        labels, dists = zip(*(fcos_targets(points, self.strides, self.loc_ranges, t["boxes"].float(), t["labels"],
                                           self.pos_radius, self.center_sample) for t in targets))
        return torch.stack(labels), torch.stack(dists) / scale

    def __call__(self, outputs, points, targets):
        cls, dist, ctr = _flat(outputs)
        labels, want = self.targets(points, targets)
        pos = labels > 0
        num_pos = max(int(pos.sum()), 1)
        onehot = torch.zeros_like(cls)
        onehot[pos, labels[pos] - 1] = 1.0
        cls_loss = sigmoid_focal_loss(cls, onehot, self.alpha, self.gamma, reduction="sum") / num_pos
        if pos.any():
            want_pos = want[pos]
            ctr_want = centerness_targets(want_pos)
            ctr_loss = F.binary_cross_entropy_with_logits(ctr[pos], ctr_want)
            giou = generalized_box_iou_loss(_distance_boxes(dist[pos]), _distance_boxes(want_pos), reduction="none")
            loc_loss = (giou * ctr_want).sum() / ctr_want.sum().clamp(min=1e-6)
        else:
            ctr_loss = ctr.sum() * 0
            loc_loss = dist.sum() * 0
        return {"loss_cls": self.cls_weight * cls_loss, "loss_loc": self.loc_weight * loc_loss,
                "loss_centerness": self.center_weight * ctr_loss}


class FcosPostprocess:
    """Head outputs -> per image {boxes xyxy, scores, labels 1..C} (UP's fcos predictor + retina merger)."""

    def __init__(self, strides, score_thresh=0.05, pre_nms_top_n=1000, nms_thresh=0.5, detections_per_img=100,
                 norm_on_bbox=True):
        self.strides, self.score_thresh, self.pre_nms_top_n = list(strides), score_thresh, pre_nms_top_n
        self.nms_thresh, self.detections_per_img, self.norm_on_bbox = nms_thresh, detections_per_img, norm_on_bbox

    @torch.no_grad()
    def __call__(self, outputs, points, image_sizes):
        results = []
        for i, (h, w) in enumerate(image_sizes):
            boxes_all, scores_all, labels_all = [], [], []
            for (cls, dist, ctr), pts, s in zip(outputs, points, self.strides):
                score = (cls[i].float().sigmoid() * ctr[i].float().sigmoid()).flatten(1).t()  # K x C
                d = dist[i].float().flatten(1).t() * (s if self.norm_on_bbox else 1)
                boxes = torch.cat((pts - d[:, :2], pts + d[:, 2:]), -1)
                boxes[:, 0::2] = boxes[:, 0::2].clamp(0, w)
                boxes[:, 1::2] = boxes[:, 1::2].clamp(0, h)
                # UP applies its score threshold only on maps of more than 120 points
                thresh = self.score_thresh if len(pts) > 120 else 0.0
                for c in range(score.shape[1]):
                    sc = score[:, c]
                    keep = (sc > thresh).nonzero()[:, 0]
                    if keep.numel() > self.pre_nms_top_n:
                        keep = keep[sc[keep].topk(self.pre_nms_top_n).indices]
                    boxes_all.append(boxes[keep])
                    scores_all.append(sc[keep])
                    labels_all.append(torch.full_like(keep, c + 1))
            boxes, scores, labels = torch.cat(boxes_all), torch.cat(scores_all), torch.cat(labels_all)
            kept = batched_nms(boxes, scores, labels, self.nms_thresh)[: self.detections_per_img]
            results.append({"boxes": boxes[kept], "scores": scores[kept], "labels": labels[kept]})
        return results
