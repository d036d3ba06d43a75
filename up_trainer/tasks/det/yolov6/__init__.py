"""YOLOv6 (UP's ``plugins/yolov6``): the EfficientRep backbone, Rep-PAN neck and efficient
decoupled head, and the re-parameterisation of their RepVGG blocks for inference. UP trains
these parts under the ATSS RetinaNet's post-process; the UP reader
(:mod:`up_trainer.tasks.up_nets.yolov6_net`) and the native ``yolov6`` entry (:mod:`.build`)
assemble them with the shared ATSS assigner, losses and predictors."""
from ....registry import MODELS
from .build import RepRetinaPlusModel, yolov6
from .parts import ConvBnAct, EfficientRep, Effidehead, RepPANNeck, SimSPPF, Transpose, net_info
from .rep import RepBlock, RepVGGBlock, fuse_rep_blocks

__all__ = ["ConvBnAct", "EfficientRep", "Effidehead", "RepBlock", "RepPANNeck", "RepVGGBlock", "SimSPPF",
           "RepRetinaPlusModel", "Transpose", "fuse_rep_blocks", "net_info", "yolov6"]
MODELS.register("yolov6")(yolov6)
