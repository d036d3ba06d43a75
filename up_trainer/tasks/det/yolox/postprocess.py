"""From the head's raw outputs to boxes: the point grid, decoding and per-class NMS.

A point of level stride s at cell (i, j) sits at (j * s, i * s); its prediction decodes to
centre ((j + dx) * s, (i + dy) * s) and size (exp(dw) * s, exp(dh) * s). Its score for class
c is sigmoid(obj) * sigmoid(cls_c).
"""
import torch
from torchvision.ops import batched_nms, box_convert

from ....errors import ConfigError


def flatten_outputs(head_out, strides):
    """Per-level (cls, reg, obj) maps -> dict of cls [N, A, C], raw_box [N, A, 4], box
    [N, A, 4] (decoded cx, cy, w, h, input pixels), obj [N, A, 1], centers [A, 2] (the
    cell centres, which the assignment uses) and strides [A]."""
    cls_all, reg_all, obj_all, grids, point_strides = [], [], [], [], []
    for (cls, reg, obj), stride in zip(head_out, strides):
        # float32 from here on: under bfloat16 autocast, (offset + cell) * stride past 256 px
        # would round to 2-8 px steps, and the losses and NMS want full precision anyway
        cls, reg, obj = cls.float(), reg.float(), obj.float()
        n, _, h, w = cls.shape
        cls_all.append(cls.flatten(2).transpose(1, 2))
        reg_all.append(reg.flatten(2).transpose(1, 2))
        obj_all.append(obj.flatten(2).transpose(1, 2))
        ys, xs = torch.meshgrid(torch.arange(h, device=cls.device), torch.arange(w, device=cls.device),
                                indexing="ij")
        grids.append(torch.stack((xs, ys), -1).reshape(-1, 2).to(reg.dtype))
        point_strides.append(torch.full((h * w,), float(stride), dtype=reg.dtype, device=reg.device))
    raw = torch.cat(reg_all, 1)
    grid, s = torch.cat(grids), torch.cat(point_strides)
    box = torch.cat(((raw[..., :2] + grid) * s[:, None], torch.exp(raw[..., 2:]) * s[:, None]), dim=-1)
    return {"cls": torch.cat(cls_all, 1), "raw_box": raw, "box": box, "obj": torch.cat(obj_all, 1),
            "centers": (grid + 0.5) * s[:, None], "strides": s}


class YoloxPostprocess:
    """Decoded outputs -> per image ``{boxes (xyxy), scores, labels (1..C)}``: every (point,
    class) scoring at least ``score_thresh``, the ``pre_nms_top_n`` best, per-class NMS at
    ``nms_thresh``, the ``detections_per_img`` best kept; boxes clipped to the image."""

    def __init__(self, score_thresh=0.01, nms_thresh=0.65, pre_nms_top_n=1000, detections_per_img=100):
        for name, value in (("score_thresh", score_thresh), ("nms_thresh", nms_thresh)):
            if not 0 <= value <= 1:
                raise ConfigError(name, f"must be in [0, 1], got {value}")
        for name, value in (("pre_nms_top_n", pre_nms_top_n), ("detections_per_img", detections_per_img)):
            if value < 1:
                raise ConfigError(name, f"must be >= 1, got {value}")
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.pre_nms_top_n, self.detections_per_img = pre_nms_top_n, detections_per_img

    @torch.no_grad()
    def __call__(self, outputs, image_sizes):
        scores_all = outputs["cls"].sigmoid() * outputs["obj"].sigmoid()  # [N, A, C]
        boxes_all = box_convert(outputs["box"], "cxcywh", "xyxy")
        num_classes = scores_all.shape[-1]
        results = []
        for scores, boxes, (h, w) in zip(scores_all, boxes_all, image_sizes):
            flat = scores.flatten()
            keep = (flat >= self.score_thresh).nonzero()[:, 0]
            if keep.numel() > self.pre_nms_top_n:
                keep = keep[flat[keep].topk(self.pre_nms_top_n).indices]
            point, label = keep // num_classes, keep % num_classes
            b = boxes[point].clone()
            b[:, 0::2] = b[:, 0::2].clamp(0, w)
            b[:, 1::2] = b[:, 1::2].clamp(0, h)
            s = flat[keep]
            kept = batched_nms(b, s, label, self.nms_thresh)[: self.detections_per_img]
            results.append({"boxes": b[kept], "scores": s[kept], "labels": label[kept] + 1})
        return results
