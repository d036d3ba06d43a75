"""The improved RetinaNet's predictors, shared by the dense anchor detectors: they live in
:mod:`up_trainer.tasks.det.anchor_predict`; named here too so the ATSS package's paths keep working."""
from ..anchor_predict import (PREDICTORS, SMALL_LEVEL, RetinaPlusPredictor, flatten_outputs,  # noqa: F401
                              grid_anchors)
