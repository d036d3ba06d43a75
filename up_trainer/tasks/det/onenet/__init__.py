"""UP's OneNet (``onenet_post``): NMS-free detection by one-to-one, minimum-cost assignment.

Each ground-truth box takes the one anchor whose prediction costs least (UP's ``easy_match``:
the minimum per box, not a Hungarian assignment), the cost being a focal classification cost
plus L1 on image-normalised corners plus negative GIoU (:mod:`.matcher`); every other anchor is
background. Losses: the class loss (focal or QFL, passed in), GIoU and L1 on the matched
predictions (:mod:`.criterion`). Prediction keeps the best (anchor, class) scores with no NMS
(:mod:`.predictor`).

``net: {type: onenet, kwargs: {num_classes: C, backbone: resnet18, ...}}`` builds the model (see
:func:`.build.onenet` for every kwarg): these parts on a backbone, an FPN and the RetinaNet-style
dense head, in :class:`..anchor_model.RetinaPlusModel`; UP's files map their kwargs onto
:func:`.build.onenet_on_parts` (:mod:`up_trainer.tasks.up_nets.onenet_net`).
"""
from ....registry import MODELS
from .build import onenet, onenet_on_parts
from .criterion import OneNetCriterion, sigmoid_focal_sum
from .matcher import OneNetMatcher
from .predictor import OneNetPredictor

__all__ = ["OneNetCriterion", "OneNetMatcher", "OneNetPredictor", "onenet", "onenet_on_parts", "sigmoid_focal_sum"]

MODELS.register("onenet")(onenet)
