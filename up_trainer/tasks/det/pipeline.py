"""A detection sample's way through its transform pipeline.

Datasets hold ``(uint8 CxHxW, target)`` with real boxes and ignore regions apart; inside a
pipeline the ignore regions travel in ``boxes`` with label 0 (real labels are 1..C), so a
transform that drops or adds boxes (SanitizeBoundingBoxes, mosaic, the box filter of
random_perspective_yolox) keeps boxes, labels and areas aligned. The two are split again when
the pipeline ends.
"""
import torch

from .transforms import PER_BOX_KEYS


def pipeline_ops(transform):
    """Every transform object in a pipeline, containers (Compose, RandomApply...) walked."""
    if transform is None:
        return
    yield transform
    for child in getattr(transform, "transforms", None) or ():
        yield from pipeline_ops(child)


def to_pipeline(image, target):
    """(uint8 or float CxHxW, target) -> (tv_tensors.Image, target with one BoundingBoxes for boxes and
    ignore regions, ``labels`` 0 for the ignore regions)."""
    from torchvision import tv_tensors

    h, w = image.shape[-2:]
    ignore = target["ignore_boxes"]
    target = dict(target)
    target["boxes"] = tv_tensors.BoundingBoxes(torch.cat([target["boxes"], ignore]), format="XYXY", canvas_size=(h, w))
    target["labels"] = torch.cat([target["labels"], torch.zeros(len(ignore), dtype=target["labels"].dtype)])
    if "area" in target:
        ignore_area = (ignore[:, 2] - ignore[:, 0]) * (ignore[:, 3] - ignore[:, 1])
        target["area"] = torch.cat([target["area"], ignore_area.to(target["area"].dtype)])
    target.pop("ignore_boxes")
    return tv_tensors.Image(image), target


def from_pipeline(image, target):
    """The inverse of :func:`to_pipeline` once the transforms ran."""
    boxes = target["boxes"]
    if "img_size" not in target or target.get("_resized") is None:
        # A plain torchvision resize updates only the boxes' canvas; our resize sets _resized.
        target["img_size"] = torch.tensor(list(boxes.canvas_size), dtype=torch.int64)
    for key in ("_resized", "_mosaic"):
        target.pop(key, None)
    boxes = boxes.as_subclass(torch.Tensor)
    real = target["labels"] > 0
    target["boxes"], target["ignore_boxes"] = boxes[real].contiguous(), boxes[~real].contiguous()
    for key in PER_BOX_KEYS:
        if key in target and len(target[key]) == len(real):
            target[key] = target[key][real]
    return image.as_subclass(torch.Tensor), target


def apply_transform(transform, image, target):
    """Run a v2 pipeline on image + boxes (ignore regions move with the boxes)."""
    image, target = to_pipeline(image, target)
    return from_pipeline(*transform(image, target))
