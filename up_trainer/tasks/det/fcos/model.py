"""UP's FCOS as one model, with the project's detector forward contract (see
:mod:`..rcnn.model`): backbone -> torchvision FPN -> :class:`.parts.FcosHead`, the criterion in
training, the post-process in eval."""
import torch
from torch import nn

from ..box_ops import batch_images, batch_targets
from .parts import fcos_points


class FcosModel(nn.Module):
    """backbone (a list of maps) -> neck (torchvision FPN over a dict) -> :class:`.parts.FcosHead`."""

    kind = "up_fcos"

    def __init__(self, backbone, neck, roi_head, criterion, postprocess, strides):
        super().__init__()
        self.backbone, self.neck, self.roi_head = backbone, neck, roi_head
        self.criterion, self.postprocess = criterion, postprocess
        self.num_classes, self.strides = roi_head.num_classes, list(strides)

    def forward(self, batch):
        if isinstance(batch, torch.Tensor):  # a bare NxCxHxW tensor (flops counting, tracing)
            batch = {"image": batch}
        targets = batch_targets(batch, self.training)
        x, sizes = batch_images(batch["image"])
        feats = self.backbone(x)
        if isinstance(feats, dict):  # a torchvision backbone's named maps (the native entry)
            feats = list(feats.values())
        feats = list(self.neck({str(i): f for i, f in enumerate(feats)}).values())
        outputs = self.roi_head(feats)
        points = fcos_points([f.shape[-2:] for f in feats], self.strides, x.device)
        if self.training:
            return self.criterion(outputs, points, targets)
        result = {"detections": self.postprocess(outputs, points, sizes)}
        if targets is not None:
            result.update(self.criterion(outputs, points, targets))
        return result
