"""UP's OneNet (``onenet_post``): NMS-free detection by one-to-one, minimum-cost assignment.

Each ground-truth box takes the one anchor whose prediction costs least (UP's ``easy_match``:
the minimum per box, not a Hungarian assignment), the cost being a focal classification cost
plus L1 on image-normalised corners plus negative GIoU (:mod:`.matcher`); every other anchor is
background. Losses: the class loss (focal or QFL, passed in), GIoU and L1 on the matched
predictions (:mod:`.criterion`). Prediction keeps the best (anchor, class) scores with no NMS
(:mod:`.predictor`). The model around these parts (backbone, FPN, RetinaNet head, anchors) is
assembled in :mod:`up_trainer.tasks.up_nets.onenet_net`.
"""
from .criterion import OneNetCriterion, sigmoid_focal_sum
from .matcher import OneNetMatcher
from .predictor import OneNetPredictor

__all__ = ["OneNetCriterion", "OneNetMatcher", "OneNetPredictor", "sigmoid_focal_sum"]
