"""UP's ``LVIS`` evaluator is refused in one line rather than approximated.

UP scores LVIS with the lvis-api package (``lvis`` on PyPI, 0.5.3), whose install requires
opencv-python (and Cython): a dependency this project does not take (images are read with
Pillow, no OpenCV anywhere). COCO AP over the same boxes is what the ``COCO`` evaluator gives;
LVIS's federated rules (per-image negative and not-exhaustive category lists) are not applied.
"""
from ...errors import ConfigError
from ...registry import EVALUATORS


@EVALUATORS.register("LVIS", aliases=("lvis",))
class LVISRefused:
    def __init__(self, **kwargs):
        raise ConfigError("", "LVIS is UP's LVIS AP evaluator (lvis-api), which is not mapped: the lvis "
                          "package requires opencv-python, a dependency up-trainer does not take",
                          "type: COCO (COCO AP, without LVIS's federated negative / not-exhaustive lists)")
