"""Test-time augmentation (``up eval --tta``, ``up predict --tta``): the model run on several
views of each batch, the results merged.

Views: every scale of ``scales`` (the image resized bilinearly by that factor; 1.0 is the
image itself), each also flipped left-right when ``flip``. Classification: the softmax
probabilities of all views averaged (``scores``; ``logits`` their log). Detection: each view's
boxes mapped back to the image (flip undone, divided by the scale), all views' detections of
an image pooled, class-wise NMS at ``nms_thresh`` (default: the model's own, else 0.5), the
best ``detections_per_img`` kept: NMS merging, not weighted box fusion.
"""
import torch
import torch.nn.functional as F
from torch import nn

from .errors import ConfigError


def parse_scales(text):
    try:
        scales = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError("--tta-scales", f"{text!r} is not a comma-separated list of numbers") from None
    if not scales or any(not 0.25 <= s <= 4 for s in scales):
        raise ConfigError("--tta-scales", f"{text!r}: give factors in [0.25, 4], e.g. 0.8,1,1.2")
    return scales


def _nms_params(model):
    det = getattr(model, "detector", None)
    for owner, nms, top in ((det, "nms_thresh", "detections_per_img"),
                            (getattr(model, "postprocess", None), "nms_thresh", "detections_per_img"),
                            (getattr(model, "predictor", None), "nms_thresh", "detections_per_img")):
        if owner is not None and hasattr(owner, nms):
            return float(getattr(owner, nms)), int(getattr(owner, top, 100))
    return 0.5, 100


def is_detection(model):
    return (hasattr(model, "detector") or getattr(model, "task", None) == "det"
            or getattr(model, "kind", None) in ("yolox", "retina_plus", "up_fcos", "up_rcnn"))


def with_tta(model, scales=(1.0,), flip=True):
    """``model`` (a module or an exported model) behind test-time augmentation."""
    return TTAModel(model, "det" if is_detection(model) else "cls", scales, flip).eval()


class TTAModel(nn.Module):
    def __init__(self, model, task, scales=(1.0,), flip=True):
        super().__init__()
        self.model, self.task = model, task
        self.views = [(s, f) for s in scales for f in ((False, True) if flip else (False,))]
        self.nms_thresh, self.detections = _nms_params(model)

    def forward(self, batch):
        if self.task == "cls":
            return self._classify(batch)
        return self._detect(batch)

    def _classify(self, batch):
        probs = 0
        for scale, flip in self.views:
            x = batch["image"]
            if scale != 1.0:
                x = F.interpolate(x.float(), scale_factor=scale, mode="bilinear", align_corners=False)
            x = x.flip(-1) if flip else x
            out = self.model({**batch, "image": x})
            probs = probs + (out["scores"] if "scores" in out else out["logits"].float().softmax(1))
        probs = probs / len(self.views)
        return {"logits": probs.clamp_min(1e-12).log(), "scores": probs}

    def _detect(self, batch):
        from torchvision.ops import batched_nms

        images = batch["image"]
        images = list(images) if isinstance(images, torch.Tensor) else images
        pooled = [[] for _ in images]
        for scale, flip in self.views:
            views = []
            for im in images:
                v = im if scale == 1.0 else F.interpolate(im[None].float(), scale_factor=scale, mode="bilinear",
                                                          align_corners=False)[0]
                views.append(v.flip(-1) if flip else v)
            dets = self.model({"image": views})["detections"]
            for i, (d, v) in enumerate(zip(dets, views)):
                boxes = d["boxes"].float().clone()
                if flip:
                    w = v.shape[-1]
                    boxes[:, 0], boxes[:, 2] = w - d["boxes"][:, 2], w - d["boxes"][:, 0]
                pooled[i].append((boxes / scale, d["scores"].float(), d["labels"]))
        out = []
        for parts in pooled:
            boxes = torch.cat([p[0] for p in parts])
            scores = torch.cat([p[1] for p in parts])
            labels = torch.cat([p[2] for p in parts])
            keep = batched_nms(boxes, scores, labels, self.nms_thresh)[: self.detections]
            out.append({"boxes": boxes[keep], "scores": scores[keep], "labels": labels[keep]})
        return {"detections": out}
