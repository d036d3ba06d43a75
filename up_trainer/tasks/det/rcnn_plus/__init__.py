"""Detectors UP trains that torchvision has no class for, built from torchvision.ops:
FCOS with UP's Scale per level, loss weighting and score (:mod:`.fcos`)."""
from .fcos import FcosCriterion, FcosHead, FcosPostprocess, Scale, centerness_targets, fcos_points, fcos_targets
from .model import FcosModel, batch_images

__all__ = ["FcosCriterion", "FcosHead", "FcosModel", "FcosPostprocess", "Scale", "batch_images",
           "centerness_targets", "fcos_points", "fcos_targets"]
