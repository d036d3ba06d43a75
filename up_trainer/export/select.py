"""Detections from dense boxes and scores, batched, in operations ONNX has (TopK, NonMaxSuppression).

:class:`Select` turns ``boxes [N, A, 4]`` (or ``[N, A, K, 4]``, a box per class: the two-stage
nets, :mod:`.two_stage`), ``scores [N, A, K]`` (:mod:`.dense`) and the size of each
image before padding into fixed-width outputs, per image:

1. per level (:class:`.dense.Level`): the best ``k`` candidates, over (anchor, class) pairs
   jointly or per class; candidates not above the level's threshold (YOLOX: not at least) are
   dropped;
2. boxes clipped to the image (x to [0, w], y to [0, h]);
3. NMS per class at ``nms_thresh`` (classes kept apart by an offset of (class x (largest
   side + 1)), as torchvision's ``batched_nms`` does), at most ``detections`` kept;
4. the kept ones best first.

Outputs: ``num_detections`` [N] (int64), ``boxes`` [N, D, 4], ``scores`` [N, D], ``labels``
[N, D] (int64, 1..C), D = min(detections, candidates); rows past ``num_detections`` are zero.
The same module runs eagerly (the raw form's decode step) and inside the exported graph, where
step 3 is one ONNX NonMaxSuppression over the whole batch.
"""
import torch
from torch import nn

from .shapes import at_most, threshold

DROPPED = -1.0  # the score of a candidate that failed its threshold; NMS ignores scores <= -0.5


class _BatchNMS(torch.autograd.Function):
    """ONNX NonMaxSuppression for boxes [N, M, 4] and scores [N, 1, M]: selected [S, 3] rows
    (image, class 0, candidate), best first within an image, at most ``max_out`` per image."""

    @staticmethod
    def forward(ctx, boxes, scores, max_out, iou):
        from torchvision.ops import nms

        if torch.compiler.is_exporting():  # torch.export: no loop over the (symbolic) batch
            return _flat_nms(boxes, scores, max_out, iou)
        rows = []
        for i in range(boxes.shape[0]):
            s = scores[i, 0]
            valid = (s > DROPPED / 2).nonzero()[:, 0]
            keep = valid[nms(boxes[i, valid], s[valid], iou)][:max_out]
            rows.append(torch.stack((torch.full_like(keep, i), torch.zeros_like(keep), keep), 1))
        return torch.cat(rows) if rows else torch.zeros((0, 3), dtype=torch.int64)

    @staticmethod
    def symbolic(g, boxes, scores, max_out, iou):
        const = lambda v, dtype: g.op("Constant", value_t=torch.tensor([v], dtype=dtype))  # noqa: E731
        return g.op("NonMaxSuppression", boxes, scores, const(max_out, torch.int64), const(iou, torch.float32),
                    const(DROPPED / 2, torch.float32))


def _flat_nms(boxes, scores, max_out, iou):
    """_BatchNMS's rows from one NMS over every image's boxes, each image's moved apart by an
    offset (as torchvision's ``batched_nms`` separates classes), at most ``max_out`` per image."""
    from torchvision.ops import nms

    n, m = boxes.shape[0], boxes.shape[1]
    b, s = boxes.reshape(-1, 4), scores[:, 0].reshape(-1)
    image = (torch.ones_like(s, dtype=torch.int64).view(n, m).cumsum(0) - 1).reshape(-1)
    valid = (s > DROPPED / 2).nonzero()[:, 0]
    shifted = b[valid] + (image[valid].to(b.dtype) * (b.max() + 1)).unsqueeze(-1)
    keep = valid[nms(shifted, s[valid], iou)]
    owner = image[keep]
    rank = ((owner.unsqueeze(1) == torch.arange(n, device=b.device).unsqueeze(0)).cumsum(0)
            .gather(1, owner.unsqueeze(1))[:, 0] - 1)
    keep, owner = keep[rank < max_out], owner[rank < max_out]
    return torch.stack((owner, torch.zeros_like(owner), keep - owner * m), 1)


class Select(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.spec = spec

    def _level(self, boxes, scores, level, count=None):
        """(boxes [N, T, 4], scores [N, T] with DROPPED where below the threshold, class [N, T]).
        ``count``: the level's anchors when they follow the input size (:mod:`.shapes`)."""
        n_cls = scores.shape[-1]
        if count is None:  # fixed size: the counts of the export size
            k = min(level.k, level.anchors) if level.per_class else min(level.k, level.anchors * n_cls)
            thresh = threshold(level.thresh, level.anchors, level.small)
        else:
            k = at_most(level.k, count if level.per_class else count * n_cls)
            thresh = threshold(level.thresh, count, level.small)
        if level.per_class:
            values, anchor = scores.topk(k, dim=1)  # [N, k, K]
            cls = torch.arange(n_cls, device=scores.device).expand_as(anchor)
            values, anchor, cls = values.flatten(1), anchor.flatten(1), cls.flatten(1)
        else:
            values, flat = scores.flatten(1).topk(k, dim=1)
            anchor = torch.div(flat, n_cls, rounding_mode="floor")
            cls = flat % n_cls
        keep = values >= thresh if level.inclusive else values > thresh
        values = torch.where(keep, values, torch.full_like(values, DROPPED))
        if boxes.dim() == 4:  # a box per class (two-stage nets): the candidate's own
            picked = torch.gather(boxes.flatten(1, 2), 1, (anchor * n_cls + cls).unsqueeze(-1).expand(-1, -1, 4))
        else:
            picked = torch.gather(boxes, 1, anchor.unsqueeze(-1).expand(-1, -1, 4))
        return picked, values, cls

    def forward(self, boxes, scores, image_sizes, counts=None):
        """``image_sizes`` [N, 2]: (h, w) of each image before padding; ``counts``: the anchors
        of each level when they follow the input size (ints, or sizes in a recorded graph),
        else the spec's."""
        spec = self.spec
        parts, start = [], 0
        for i, level in enumerate(spec.levels):
            count = None if counts is None else counts[i]
            end = start + (level.anchors if count is None else count)
            parts.append(self._level(boxes[:, start:end], scores[:, start:end], level, count))
            start = end
        b = torch.cat([p[0] for p in parts], 1)
        s = torch.cat([p[1] for p in parts], 1)
        c = torch.cat([p[2] for p in parts], 1)
        sizes = image_sizes.to(b.dtype)
        h, w = sizes[:, 0].view(-1, 1), sizes[:, 1].view(-1, 1)
        x = torch.minimum(b[..., 0::2].clamp(min=0), w.unsqueeze(-1))
        y = torch.minimum(b[..., 1::2].clamp(min=0), h.unsqueeze(-1))
        b = torch.stack((x[..., 0], y[..., 0], x[..., 1], y[..., 1]), -1)
        if spec.min_size > 0:  # torchvision's RoIHeads drops boxes clipped to (almost) nothing
            wide = ((b[..., 2] - b[..., 0]) >= spec.min_size) & ((b[..., 3] - b[..., 1]) >= spec.min_size)
            s = torch.where(wide, s, torch.full_like(s, DROPPED))
        offset = (c.to(b.dtype) * (sizes.max() + 1)).unsqueeze(-1)
        selected = _BatchNMS.apply(b + offset, s.unsqueeze(1), spec.detections, spec.nms_thresh)
        kept = torch.zeros_like(s).index_put((selected[:, 0], selected[:, 2]), torch.ones_like(selected[:, 0],
                                                                                               dtype=s.dtype))
        ranked = torch.where(kept > 0, s, torch.full_like(s, -2.0))
        top_scores, idx = ranked.topk(min(spec.detections, s.shape[1]), dim=1)
        num = (kept > 0).sum(1)
        valid = top_scores > -1.5
        out_boxes = torch.gather(b, 1, idx.unsqueeze(-1).expand(-1, -1, 4)) * valid.unsqueeze(-1).to(b.dtype)
        out_scores = torch.where(valid, top_scores, torch.zeros_like(top_scores))
        labels = torch.where(valid, torch.gather(c, 1, idx) + spec.label_offset, torch.zeros_like(idx))
        return num, out_boxes, out_scores, labels


def unpad(num, boxes, scores, labels):
    """The padded outputs as one {boxes, scores, labels} per image."""
    out = []
    for i in range(int(torch.as_tensor(num).shape[0])):
        n = int(num[i])
        out.append({"boxes": torch.as_tensor(boxes[i][:n]), "scores": torch.as_tensor(scores[i][:n]),
                    "labels": torch.as_tensor(labels[i][:n]).long()})
    return out


class EndToEnd(nn.Module):
    """image [N, 3, H, W], image_sizes [N, 2] -> num_detections, boxes, scores, labels."""

    output_names = ["num_detections", "boxes", "scores", "labels"]

    def __init__(self, dense):
        super().__init__()
        self.dense = dense
        self.select = Select(dense.spec)

    def forward(self, image, image_sizes):
        boxes, scores, counts = self.dense.levels(image)
        return self.select(boxes, scores, image_sizes, counts if self.dense.dynamic else None)
