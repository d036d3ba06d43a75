"""The second stage of UP's two-stage detectors: one box stage (Faster R-CNN C4, R-FCN) or
several (Cascade R-CNN), each a net ``(features, rois, image sizes) -> (class logits [R, C+1],
box deltas [R, 4] class-agnostic or [R, 4 (C+1)])``.

Training, per stage t: the ground-truth boxes join the proposals, each RoI is matched at the
stage's IoU thresholds (UP's ``max_iou`` matcher), ``batch_size`` RoIs are sampled with
``positive_percent`` positives, deltas are encoded with the stage's ``1 / std`` weights; the
loss is softmax cross-entropy (mean over the sampled RoIs) plus smooth-L1 (beta = 1 / sigma^2)
summed over the positives and divided by the sampled count, both times the stage's weight.
Before the next stage the sampled RoIs (ground truth removed) are moved by their predicted
deltas (of their target class), without gradient; RoIs clipped to nothing are dropped.

Test: the stages run in turn on the refined boxes; the class probabilities are averaged over
the stages (``test_ensemble``, Cascade R-CNN) or the last stage's are used, the last stage's
deltas give the boxes; per class: score threshold, NMS, then the ``top_n`` best per image.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.detection._utils import BalancedPositiveNegativeSampler
from torchvision.ops import batched_nms, box_iou, clip_boxes_to_image, remove_small_boxes


def sample_rois(proposals, targets, matcher, sampler, coder):
    """Per image: (sampled RoIs [R, 4], labels [R] (0 background), encoded deltas [R, 4],
    is-ground-truth flags [R])."""
    rois, labels, deltas, flags = [], [], [], []
    for props, target in zip(proposals, targets):
        gt, gt_labels = target["boxes"].to(props.dtype), target["labels"]
        boxes = torch.cat([props, gt])
        is_gt = torch.cat([props.new_zeros(len(props), dtype=torch.bool), props.new_ones(len(gt), dtype=torch.bool)])
        if len(gt):
            matched = matcher(box_iou(gt, boxes))
            lab = gt_labels[matched.clamp(min=0)].clone()
            lab[matched == matcher.BELOW_LOW_THRESHOLD] = 0
            lab[matched == matcher.BETWEEN_THRESHOLDS] = -1
            assigned = gt[matched.clamp(min=0)]
        else:
            lab, assigned = gt_labels.new_zeros(len(boxes)), torch.zeros_like(boxes)
        pos, neg = sampler([lab])
        keep = torch.where(pos[0] | neg[0])[0]
        rois.append(boxes[keep])
        labels.append(lab[keep])
        deltas.append(coder.encode_single(assigned[keep], boxes[keep]))
        flags.append(is_gt[keep])
    return rois, labels, deltas, flags


def pick_deltas(deltas, classes):
    """[R, 4] deltas of each RoI's class (of the only box when class-agnostic)."""
    d = deltas.view(len(deltas), deltas.shape[1] // 4, 4)
    if d.shape[1] == 1:
        return d[:, 0]
    return d[torch.arange(len(d), device=d.device), classes]


def box_loss(logits, deltas, labels, wanted, beta):
    """(softmax CE mean over RoIs, smooth-L1 over positives / RoI count)."""
    if not len(labels):  # no RoI at all: zero losses that still reach every parameter
        return logits.sum() * 0, deltas.sum() * 0
    cls = F.cross_entropy(logits, labels)
    pos = labels > 0
    loc = F.smooth_l1_loss(pick_deltas(deltas, labels)[pos], wanted[pos], beta=beta, reduction="sum")
    return cls, loc / max(len(labels), 1)


class BoxStages(nn.Module):
    """``nets``: one module per stage. ``matchers``/``coders``: per stage. ``weights``: the
    stages' loss weights. ``ensemble``: average the stages' probabilities at test time."""

    def __init__(self, nets, matchers, coders, batch_size, positive_fraction, beta=1.0, weights=None,
                 ensemble=False, score_thresh=0.0, nms_thresh=0.5, detections_per_img=100):
        super().__init__()
        self.nets = nn.ModuleList(nets)
        self.matchers, self.coders = list(matchers), list(coders)
        self.sampler = BalancedPositiveNegativeSampler(batch_size, positive_fraction)
        self.beta, self.weights = float(beta), list(weights or [1.0] * len(nets))
        self.ensemble, self.score_thresh = ensemble, score_thresh
        self.nms_thresh, self.detections_per_img = nms_thresh, detections_per_img

    def losses(self, features, proposals, sizes, targets):
        rois, out = proposals, {}
        last = len(self.nets) - 1
        for t, net in enumerate(self.nets):
            rois, labels, wanted, is_gt = sample_rois(rois, targets, self.matchers[t], self.sampler, self.coders[t])
            logits, deltas = (o.float() for o in net(features, rois, sizes))  # float32 under autocast
            cls, loc = box_loss(logits, deltas, torch.cat(labels), torch.cat(wanted), self.beta)
            suffix = f"_s{t + 1}" if last else ""
            out[f"loss_box_cls{suffix}"] = self.weights[t] * cls
            out[f"loss_box_loc{suffix}"] = self.weights[t] * loc
            if t < last:
                with torch.no_grad():
                    moved = self.coders[t].decode_single(pick_deltas(deltas.detach(), torch.cat(labels)),
                                                         torch.cat(rois))
                rois = [_usable(clip_boxes_to_image(b[~g], s))
                        for b, g, s in zip(moved.split([len(r) for r in rois]), is_gt, sizes)]
        return out

    @torch.no_grad()
    def detect(self, features, proposals, sizes):
        rois, probs = proposals, []
        for t, net in enumerate(self.nets):
            logits, deltas = (o.float() for o in net(features, rois, sizes))
            p = F.softmax(logits, -1)
            probs.append(p)
            if t < len(self.nets) - 1:
                best = p[:, 1:].argmax(1) + 1
                moved = self.coders[t].decode_single(pick_deltas(deltas, best), torch.cat(rois))
                rois = [clip_boxes_to_image(b, s) for b, s in zip(moved.split([len(r) for r in rois]), sizes)]
        scores = sum(probs) / len(probs) if self.ensemble else probs[-1]
        n, c = scores.shape
        d = deltas.view(n, 1, 4).expand(n, c, 4) if deltas.shape[1] == 4 else deltas.view(n, c, 4)
        boxes = self.coders[-1].decode_single(d.reshape(-1, 4), torch.cat(rois).repeat_interleave(c, 0)).view(n, c, 4)
        results, start = [], 0
        for r, size in zip(rois, sizes):
            b, s = clip_boxes_to_image(boxes[start:start + len(r), 1:], size), scores[start:start + len(r), 1:]
            start += len(r)
            labels = torch.arange(1, c, device=s.device).expand_as(s)
            b, s, labels = b.reshape(-1, 4), s.reshape(-1), labels.reshape(-1)
            keep = torch.where(s > self.score_thresh)[0]
            b, s, labels = b[keep], s[keep], labels[keep]
            kept = batched_nms(b, s, labels, self.nms_thresh)[: self.detections_per_img]
            results.append({"boxes": b[kept], "scores": s[kept], "labels": labels[kept]})
        return results


def _usable(boxes, min_size=1e-3):
    """The refined RoIs the next stage can encode against: a box moved out of the image is
    clipped to zero width or height, and its deltas would be infinite."""
    return boxes[remove_small_boxes(boxes, min_size)]

