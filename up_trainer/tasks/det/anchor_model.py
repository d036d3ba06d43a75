"""RetinaPlusModel: backbone + FPN + a dense anchor head (:class:`.anchor_head.RetinaPlusHead`),
its criterion and predictor passed in, with the forward contract of the project's other
detectors (:class:`.models.DetectionModel`, :class:`.yolox.YoloxModel`). Shared by the families
built on UP's anchor-based dense heads: the ATSS RetinaNet (its assigner, losses, predictors),
OneNet (one-to-one matching, no NMS) and the YOLOv6 / YOLOX parts under UP's RetinaNet post-process.

Anchors follow UP's ``hand_craft`` rule (:func:`.pyramid_levels.cell_anchors`), shifted by
(x * stride, y * stride); ordered row, column, then anchor within the cell, levels one after
another."""
from collections import OrderedDict

import torch
from torch import nn

from ...weights import load_fitting, load_weights, under_backbone
from .box_ops import batch_images


def grid_anchors(cell_anchors, stride, height, width, device=None):
    """[H * W * A, 4] anchors of one level: every cell anchor at every (x * stride, y * stride)."""
    cell = cell_anchors.to(device)
    ys, xs = torch.meshgrid(torch.arange(height, device=device, dtype=cell.dtype) * stride,
                            torch.arange(width, device=device, dtype=cell.dtype) * stride, indexing="ij")
    shifts = torch.stack((xs, ys, xs, ys), dim=-1).reshape(-1, 1, 4)
    return (shifts + cell[None]).reshape(-1, 4)


def flatten_outputs(head_out, class_first=False):
    """Per-level maps -> cls [N, K, C], deltas [N, K, 4], iou [N, K] or None (K anchors over all
    levels). ``class_first``: the class channels are laid out class-major (UP's
    ``retina_post_iou``) rather than anchor-major (UP's ``retina_post``)."""
    cls_all, loc_all, iou_all = [], [], []
    for preds in head_out:
        cls, loc = preds[0], preds[1]
        n, _, h, w = cls.shape
        a = loc.shape[1] // 4
        c = cls.shape[1] // a
        if class_first:
            cls = cls.view(n, c, a, h, w).permute(0, 3, 4, 2, 1)
        else:
            cls = cls.view(n, a, c, h, w).permute(0, 3, 4, 1, 2)
        cls_all.append(cls.reshape(n, h * w * a, c))
        loc_all.append(loc.view(n, a, 4, h, w).permute(0, 3, 4, 1, 2).reshape(n, h * w * a, 4))
        if len(preds) > 2:
            iou_all.append(preds[2].permute(0, 2, 3, 1).reshape(n, h * w * a))
    return {"cls": torch.cat(cls_all, 1), "deltas": torch.cat(loc_all, 1),
            "iou": torch.cat(iou_all, 1) if iou_all else None}


class RetinaPlusModel(nn.Module):
    """forward(batch): ``batch["image"]`` a list of float CxHxW (or an NxCxHxW tensor, or the
    bare tensor), normalised here by ``image_mean``/``image_std`` when given (UP's pipeline
    normalises itself: None), padded bottom/right with 0 to a multiple of 32. Training:
    ``{loss_cls, loss_loc[, loss_iou]}``; eval: ``{"detections": [{boxes xyxy in the input
    image's pixels, scores, labels 1..C}, ...]}`` plus the losses when the batch has targets.

    ``backbone`` returns a list or an ordered dict of maps; ``neck`` (torchvision's FPN) takes
    the ordered dict, or the list with ``neck_takes_list`` (a neck of another layout, such as
    YOLOX's PAFPN, which returns a list too); ``roi_head`` the neck's maps as a list.
    ``cell_anchors``: one [A, 4] tensor per level, shifted by ``strides``.
    """

    kind = "retina_plus"

    def __init__(self, backbone, neck, roi_head, criterion, predictor, strides, cell_anchors, class_first=False,
                 image_mean=None, image_std=None, neck_takes_list=False):
        super().__init__()
        self.neck_takes_list = neck_takes_list
        self.backbone, self.neck, self.roi_head = backbone, neck, roi_head
        self.num_classes = roi_head.num_classes
        self.strides = list(strides)
        self.criterion, self.predictor, self.class_first = criterion, predictor, class_first
        if isinstance(getattr(criterion, "cls_loss", None), nn.Module):  # its state (EFL's gradient
            # statistics) is the model's, checkpointed; UP's gradient_collector names it post_process.cls_loss
            self.post_process = nn.ModuleDict({"cls_loss": criterion.cls_loss})
        self.cell_anchors = [c.float() for c in cell_anchors]
        mean = None if image_mean is None else torch.tensor(image_mean, dtype=torch.float32).view(-1, 1, 1)
        std = None if image_std is None else torch.tensor(image_std, dtype=torch.float32).view(-1, 1, 1)
        self.register_buffer("image_mean", mean, persistent=False)
        self.register_buffer("image_std", std, persistent=False)

    def batch_images(self, images):
        """(N x C x H' x W' batch, normalized then zero-padded, [(h, w)] of each image before padding)."""
        if self.image_mean is not None:
            norm = lambda t: (t - self.image_mean) / self.image_std  # noqa: E731
            images = norm(images) if isinstance(images, torch.Tensor) else [norm(im) for im in images]
        return batch_images(images)

    def features(self, x):
        feats = self.backbone(x)
        if self.neck_takes_list:
            out = self.neck(list(feats.values()) if isinstance(feats, dict) else list(feats))
        else:
            out = self.neck(feats if isinstance(feats, dict) else OrderedDict((str(i), f) for i, f in enumerate(feats)))
        return list(out.values()) if isinstance(out, dict) else list(out)

    def anchors(self, feature_maps):
        return [grid_anchors(cell, stride, f.shape[-2], f.shape[-1], f.device).to(f.dtype)
                for cell, stride, f in zip(self.cell_anchors, self.strides, feature_maps)]

    def forward(self, batch):
        if isinstance(batch, torch.Tensor):  # a bare NxCxHxW tensor (flops counting, tracing)
            batch = {"image": batch}
        x, sizes = self.batch_images(batch["image"])
        feats = self.features(x)
        # decoding, IoUs and losses in float32 (under autocast the head's outputs may be half / bfloat16)
        outputs = {k: None if v is None else v.float()
                   for k, v in flatten_outputs(self.roi_head(feats), self.class_first).items()}
        anchors = [a.float() for a in self.anchors(feats)]
        targets = batch.get("target")
        if self.training:
            if targets is None:
                raise ValueError("RetinaPlusModel in training mode needs batch['target']")
            return self.criterion(outputs, anchors, targets, sizes)
        result = {"detections": self.predictor(outputs, anchors, sizes)}
        if targets is not None:
            result.update(self.criterion(outputs, anchors, targets, sizes))
        return result

    def load_pretrained(self, path, backbone_only=False):
        """Load what fits from a local file (``module.`` prefixes dropped); report the rest.
        ``backbone_only``: an ImageNet classifier file, loaded under ``backbone.``."""
        state = {(k[len("module."):] if k.startswith("module.") else k): v for k, v in load_weights(path).items()}
        own = self.state_dict()
        if backbone_only:
            state = under_backbone(state, own)
        # BatchNorm's batch counter is no weight (torchvision's ImageNet files predate it)
        scope = [k for k in own if k.startswith("backbone.") and not k.endswith(".num_batches_tracked")] \
            if backbone_only else None
        return load_fitting(self, state, f"pretrained {path}", scope=scope)
