"""Two-stage detectors UP trains that torchvision has no class for, built from torchvision.ops:
:class:`TwoStageModel` on torchvision's region proposals (:mod:`.proposals`) with UP's box
stages (:mod:`.box_stages`): Faster R-CNN with a ResNet stage-5 RoI head, R-FCN's
position-sensitive pooling, Cascade R-CNN (:mod:`.heads`).

Native net types (:mod:`.build`, every kwarg in docs/detection/two_stage.rst): ``faster_rcnn_c4``,
``rfcn``, ``cascade_rcnn``; the proposal and box stages from native kwargs in :mod:`.stages`.
UP's net lists map their kwargs onto the same stages (:mod:`up_trainer.tasks.up_nets.rcnn_net`)."""
from ....registry import MODELS
from .build import cascade_rcnn, faster_rcnn_c4, rfcn
from .box_stages import BoxStages, box_loss, pick_deltas, sample_rois
from .heads import FCHead, Res5Head, RFCNHead
from .model import TwoStageModel
from .matching import UPMatcher
from .proposals import UPRegionProposals

__all__ = ["BoxStages", "FCHead", "RFCNHead", "Res5Head", "TwoStageModel", "UPMatcher", "UPRegionProposals", "box_loss",
           "cascade_rcnn", "faster_rcnn_c4", "pick_deltas", "rfcn", "sample_rois"]

MODELS.register("faster_rcnn_c4")(faster_rcnn_c4)
MODELS.register("rfcn")(rfcn)
MODELS.register("cascade_rcnn")(cascade_rcnn)
