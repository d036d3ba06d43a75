"""Detections and the validation loss from one forward pass (RetinaNet, FCOS).

torchvision's dense detectors return losses in training mode and detections in eval mode,
never both. Running the model twice would double the evaluation's cost, and training mode
would let BatchNorm update its statistics. This runs torchvision's own steps once, with
every module in eval mode: transform (images and targets), backbone, head, anchors, then
``compute_loss`` on the head's outputs and ``postprocess_detections`` on the same outputs.
The detections equal the eval-mode forward's exactly (same functions, same inputs).
"""
from collections import OrderedDict

KINDS = ("retinanet", "fcos")


def detections_and_losses(det, kind, images, targets):
    original_sizes = [tuple(img.shape[-2:]) for img in images]
    targets = [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets]
    image_list, targets = det.transform(images, targets)
    features = det.backbone(image_list.tensors)
    if not isinstance(features, (dict, OrderedDict)):
        features = OrderedDict([("0", features)])
    features = list(features.values())
    head_outputs = det.head(features)
    anchors = det.anchor_generator(image_list, features)
    per_level = [f.size(2) * f.size(3) for f in features]
    if kind == "fcos":
        losses = det.compute_loss(targets, head_outputs, anchors, per_level)
    else:
        losses = det.compute_loss(targets, head_outputs, anchors)
        per_location = head_outputs["cls_logits"].size(1) // sum(per_level)
        per_level = [n * per_location for n in per_level]
    split_outputs = {k: list(v.split(per_level, dim=1)) for k, v in head_outputs.items()}
    split_anchors = [list(a.split(per_level)) for a in anchors]
    detections = det.postprocess_detections(split_outputs, split_anchors, image_list.image_sizes)
    detections = det.transform.postprocess(detections, image_list.image_sizes, original_sizes)
    return detections, losses
