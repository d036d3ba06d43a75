"""The two-stage detectors' forward (the project's detector contract): ``forward(batch)`` with
``batch["image"]`` a list of float CxHxW (already resized and normalised by UP's pipeline) or an
NxCxHxW tensor, ``batch["target"]`` a list of {boxes xyxy, labels 1..C}. Training returns the
losses; eval returns ``{"detections": [{boxes, scores, labels 1..C}, ...]}`` and, when targets
are given, the losses as well (the validation loss)."""
import torch
from torch import nn

from ..box_ops import batch_images, batch_targets


class TwoStageModel(nn.Module):
    """backbone [-> neck (torchvision FPN)] -> region proposals -> :class:`.box_stages.BoxStages`.

    ``names``: UP's entry names of the backbone, the neck (or None: the backbone's last map is
    the one feature map, ``"0"``), the RPN and the box head, which become the children."""

    kind = "up_rcnn"

    def __init__(self, names, backbone, neck, rpn, box_head, num_classes, strides):
        super().__init__()
        self.names = dict(names)
        self.add_module(names["backbone"], backbone)
        if neck is not None:
            self.add_module(names["neck"], neck)
        self.add_module(names["rpn"], rpn)
        self.add_module(names["box"], box_head)
        self.num_classes, self.strides = num_classes, list(strides)

    def _part(self, role):
        return getattr(self, self.names[role])

    def forward(self, batch):
        from torchvision.models.detection.image_list import ImageList

        if isinstance(batch, torch.Tensor):
            batch = {"image": batch}
        targets = batch_targets(batch, self.training)
        x, sizes = batch_images(batch["image"])
        feats = self._part("backbone")(x)
        if isinstance(feats, dict):  # a torchvision backbone's named maps (the native entries)
            feats = list(feats.values())
        if self.names.get("neck"):
            feats = self._part("neck")({str(i): f for i, f in enumerate(feats)})
        else:
            feats = {"0": feats[-1]}
        proposals, losses = self._part("rpn")(ImageList(x, sizes), feats, targets)
        box = self._part("box")
        if targets is not None:
            losses.update(box.losses(feats, proposals, sizes, targets))
        if self.training:
            return losses
        return {"detections": box.detect(feats, proposals, sizes), **losses}
