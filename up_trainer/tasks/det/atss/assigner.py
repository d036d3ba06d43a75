"""The ATSS assigner, shared by the dense anchor detectors: it lives in
:mod:`up_trainer.tasks.det.anchor_assign`; named here too so the ATSS package's paths keep working."""
from ..anchor_assign import INSIDE_MARGIN, NEGATIVE, ATSSAssigner  # noqa: F401
