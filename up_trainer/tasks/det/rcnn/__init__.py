"""Two-stage detectors UP trains that torchvision has no class for, built from torchvision.ops:
:class:`TwoStageModel` on torchvision's region proposals (:mod:`.proposals`) with UP's box
stages (:mod:`.box_stages`): Faster R-CNN with a ResNet stage-5 RoI head, R-FCN's
position-sensitive pooling, Cascade R-CNN (:mod:`.heads`). UP's net lists are read by
:mod:`up_trainer.tasks.up_nets.rcnn_net`."""
from .box_stages import BoxStages, box_loss, pick_deltas, sample_rois
from .heads import FCHead, Res5Head, RFCNHead
from .model import TwoStageModel
from .proposals import UPRegionProposals

__all__ = ["BoxStages", "FCHead", "RFCNHead", "Res5Head", "TwoStageModel", "UPRegionProposals", "box_loss",
           "pick_deltas", "sample_rois"]
