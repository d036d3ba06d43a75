"""YOLOv6 (UP's ``plugins/yolov6``): the EfficientRep backbone, Rep-PAN neck and efficient
decoupled head, and the re-parameterisation of their RepVGG blocks for inference. UP trains
these parts under the ATSS RetinaNet's post-process; the UP reader
(:mod:`up_trainer.tasks.up_nets.yolov6_net`) assembles them with :mod:`..atss`."""
from .parts import ConvBnAct, EfficientRep, Effidehead, RepPANNeck, SimSPPF, Transpose, net_info
from .rep import RepBlock, RepVGGBlock, fuse_rep_blocks

__all__ = ["ConvBnAct", "EfficientRep", "Effidehead", "RepBlock", "RepPANNeck", "RepVGGBlock", "SimSPPF",
           "Transpose", "fuse_rep_blocks", "net_info"]
