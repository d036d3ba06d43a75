"""The improved RetinaNet's criterion, shared by the dense anchor detectors: it lives in
:mod:`up_trainer.tasks.det.anchor_losses`; named here too so the ATSS package's paths keep working."""
from ..anchor_losses import LOSS_KEYS, RetinaPlusCriterion, dynamic_normalizer, quality_focal_loss  # noqa: F401
