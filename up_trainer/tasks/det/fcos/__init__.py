"""UP's FCOS on torchvision ops: a head with UP's Scale per level, FCOS targets with centre
sampling, UP's loss weighting and score (:mod:`.parts`), one model (:mod:`.model`). UP's net
lists (``FPN`` + ``FcosHead`` + ``fcos_post``) are read by :mod:`up_trainer.tasks.up_nets.fcos_net`."""
from .model import FcosModel
from .parts import FcosCriterion, FcosHead, FcosPostprocess, Scale, centerness_targets, fcos_points, fcos_targets

__all__ = ["FcosCriterion", "FcosHead", "FcosModel", "FcosPostprocess", "Scale", "centerness_targets",
           "fcos_points", "fcos_targets"]
