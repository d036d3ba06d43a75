"""Detectors UP trains that torchvision has no class for, built from torchvision.ops:
FCOS with UP's Scale per level, loss weighting and score (:mod:`.fcos`); two-stage detectors
(:class:`TwoStageModel`) on torchvision's region proposals with UP's box stages
(:mod:`.box_stages`): Faster R-CNN with a ResNet stage-5 RoI head, R-FCN's position-sensitive
pooling, Cascade R-CNN (:mod:`.heads`)."""
from .box_stages import BoxStages, box_coder, box_loss, pick_deltas, sample_rois
from .fcos import FcosCriterion, FcosHead, FcosPostprocess, Scale, centerness_targets, fcos_points, fcos_targets
from .heads import FCHead, Res5Head, RFCNHead
from .model import FcosModel, TwoStageModel, batch_images
from .proposals import UPRegionProposals

__all__ = ["BoxStages", "FCHead", "FcosCriterion", "FcosHead", "FcosModel", "FcosPostprocess", "RFCNHead",
           "Res5Head", "Scale", "TwoStageModel", "UPRegionProposals", "batch_images", "box_coder", "box_loss",
           "centerness_targets", "fcos_points", "fcos_targets", "pick_deltas", "sample_rois"]
