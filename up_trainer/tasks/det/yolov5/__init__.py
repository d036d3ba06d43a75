"""YOLOv5 as UP builds it (UP's yolov5 plugin): the DarkNetv5 backbone, DarknetPAFPN neck,
YoloV5Head and the ``yolov5_post`` targets, losses and predictor, with UP's module names.

``net: {type: yolov5, kwargs: {num_classes: C, width: 32, depths: [1, 3, 3, 1], ...}}`` builds
a :class:`YoloV5Model` (see :func:`.build.yolov5` for every kwarg); UP's net lists are mapped
onto the same kwargs by :mod:`up_trainer.tasks.up_nets.yolov5_net`."""
from ....registry import MODELS
from .build import yolov5
from .layers import SPP, Bottleneck, BottleneckCSP, ConvBnAct, Focus, yolov5_init
from .loss import YoloV5Criterion, ciou, level_targets
from .model import YoloV5Model, YoloV5Predictor
from .nets import DarknetPAFPN, DarkNetv5, YoloV5Head

__all__ = ["SPP", "Bottleneck", "BottleneckCSP", "ConvBnAct", "DarkNetv5", "DarknetPAFPN", "Focus", "YoloV5Criterion",
           "YoloV5Head", "YoloV5Model", "YoloV5Predictor", "ciou", "level_targets", "yolov5", "yolov5_init"]

MODELS.register("yolov5")(yolov5)
