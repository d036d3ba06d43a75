"""UP's FCOS on torchvision ops: a head with UP's Scale per level, FCOS targets with centre
sampling, UP's loss weighting and score (:mod:`.parts`), one model (:mod:`.model`).

``net: {type: up_fcos, kwargs: {num_classes: C, backbone: resnet50, ...}}`` builds it (see
:func:`.build.up_fcos` for every kwarg); UP's net lists (``FPN`` + ``FcosHead`` + ``fcos_post``)
map their kwargs onto :func:`.build.fcos_on_trunk` (:mod:`up_trainer.tasks.up_nets.fcos_net`)."""
from ....registry import MODELS
from .build import fcos_on_trunk, up_fcos
from .model import FcosModel
from .parts import FcosCriterion, FcosHead, FcosPostprocess, Scale, centerness_targets, fcos_points, fcos_targets

__all__ = ["FcosCriterion", "FcosHead", "FcosModel", "FcosPostprocess", "Scale", "centerness_targets",
           "fcos_on_trunk", "fcos_points", "fcos_targets", "up_fcos"]

MODELS.register("up_fcos")(up_fcos)
