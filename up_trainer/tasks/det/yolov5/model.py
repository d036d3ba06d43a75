"""YoloV5Model: DarkNetv5 + DarknetPAFPN + YoloV5Head with UP's ``yolov5_post`` losses and
predictor, with the forward contract of the project's other detectors."""
import torch
import torch.distributed as dist
from torch import nn
from torchvision.ops import batched_nms

from ..box_ops import batch_images, batch_targets
from .loss import YoloV5Criterion, xywh_to_xyxy


def permute(levels, num_anchors):
    """Per level (box, cls, obj) N x A*K x H x W -> N x A x H x W x K each (UP's permute_preds)."""
    out = []
    for preds in levels:
        out.append(tuple(p.view(p.shape[0], num_anchors, -1, *p.shape[-2:]).permute(0, 1, 3, 4, 2).float()
                         for p in preds))
    return out


class YoloV5Predictor:
    """UP's ``yolov5`` predictor and merger: decode (centre (2 sigmoid - 0.5 + cell) x stride,
    size (2 sigmoid)^2 x anchor), keep points with objectness > ``conf_thres``, every class with
    objectness x class score > ``conf_thres``, per-class NMS, the ``top_n`` best per image."""

    def __init__(self, anchors, strides, conf_thres=0.001, nms_thresh=0.6, top_n=300):
        self.anchors, self.strides = anchors, list(strides)
        self.conf_thres, self.nms_thresh, self.top_n = conf_thres, nms_thresh, top_n

    def decode(self, levels):
        boxes, scores = [], []
        for lvl, (loc, cls, obj) in enumerate(levels):
            n, a, h, w, _ = loc.shape
            ys, xs = torch.meshgrid(torch.arange(h, device=loc.device), torch.arange(w, device=loc.device),
                                    indexing="ij")
            grid = torch.stack((xs, ys), -1).view(1, 1, h, w, 2).to(loc)
            anchors = self.anchors[lvl].to(loc).view(1, a, 1, 1, 2)
            xy = (loc[..., :2].sigmoid() * 2 - 0.5 + grid) * self.strides[lvl]
            wh = (loc[..., 2:].sigmoid() * 2) ** 2 * anchors
            boxes.append(xywh_to_xyxy(torch.cat((xy, wh), -1)).reshape(n, -1, 4))
            scores.append(torch.cat((obj.sigmoid(), cls.sigmoid()), -1).reshape(n, -1, 1 + cls.shape[-1]))
        return torch.cat(boxes, 1), torch.cat(scores, 1)

    def __call__(self, levels, sizes):
        boxes, scores = self.decode(levels)
        results = []
        for b, s, (h, w) in zip(boxes, scores, sizes):
            keep = s[:, 0] > self.conf_thres
            b, conf = b[keep], s[keep, 1:] * s[keep, :1]
            idx, cls = (conf > self.conf_thres).nonzero(as_tuple=True)
            b, sc = b[idx], conf[idx, cls]
            b = torch.stack((b[:, 0].clamp(0, w), b[:, 1].clamp(0, h), b[:, 2].clamp(0, w), b[:, 3].clamp(0, h)), 1)
            kept = batched_nms(b, sc, cls, self.nms_thresh)[: self.top_n]
            results.append({"boxes": b[kept], "scores": sc[kept], "labels": cls[kept] + 1})
        return results


class YoloV5Model(nn.Module):
    """forward(batch): ``batch["image"]`` a list of float CxHxW in [0, 1] (UP's ``to_tensor``),
    padded bottom/right with 0 to a multiple of 32. Training: ``{loss_box, loss_obj,
    loss_cls}``; eval: ``{"detections": [{boxes xyxy, scores, labels 1..C}, ...]}`` plus the
    losses when the batch has targets. ``anchors``: one [A, 2] (w, h in pixels) per level."""

    kind = "yolov5"

    def __init__(self, backbone, neck, roi_head, anchors, criterion_kwargs=None, predictor_kwargs=None):
        super().__init__()
        self.backbone, self.neck, self.roi_head = backbone, neck, roi_head
        self.num_classes = roi_head.num_classes
        self.strides = list(roi_head.strides)
        self.register_buffer("anchors", torch.as_tensor(anchors, dtype=torch.float32), persistent=False)
        self.criterion_kwargs, self.predictor_kwargs = dict(criterion_kwargs or {}), dict(predictor_kwargs or {})

    def forward(self, batch):
        if isinstance(batch, torch.Tensor):
            batch = {"image": batch}
        x, sizes = batch_images(batch["image"])
        levels = permute(self.roi_head(self.neck(self.backbone(x))), self.roi_head.num_point)
        targets = batch_targets(batch, self.training)
        anchors = list(self.anchors)
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        losses = {} if targets is None else \
            YoloV5Criterion(self.num_classes, anchors, self.strides, **self.criterion_kwargs)(levels, targets, world)
        if self.training:
            return losses
        with torch.no_grad():
            detections = YoloV5Predictor(anchors, self.strides, **self.predictor_kwargs)(levels, sizes)
        return {"detections": detections, **losses}
