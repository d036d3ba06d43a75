"""up-trainer: YAML-driven training for image classification and object detection.

The Python API (``up_trainer.load_config``, ``train``, ``evaluate``, ``predict``, ``export``,
``build_trainer``, ``Hook``, ``ConfigError``, ...) lives in :mod:`up_trainer.api`; its names are
reachable here, imported on first use so that ``up --help`` imports nothing it does not need.
"""
import sys
import types

__version__ = "0.1.0"

_API_NAMES = ("load_config", "train", "evaluate", "predict", "export", "build_trainer", "Config", "TrainResult",
              "Hook", "EVENTS", "ConfigError", "CheckpointError", "DataError", "TrainingInterrupted", "UserError")


def __getattr__(name):
    if name in _API_NAMES:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'up_trainer' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API_NAMES])


class _Package(types.ModuleType):
    """``up_trainer.predict`` and ``up_trainer.export`` name the API's functions, and also
    modules of this package (predict.py, export/). Python binds a submodule to its package's
    attribute of the same name when it is first imported, which would hide the function from
    then on; this package keeps those names for the API. The modules stay importable as
    always (``from up_trainer.predict import Predictor``, ``from up_trainer.export import
    export_model``): those imports read ``sys.modules``, not this attribute. Only the forms
    that read the attribute (``import up_trainer.predict as m``, a dotted string such as
    ``"up_trainer.predict.Predictor"`` given to a patcher) see the function; use
    ``sys.modules["up_trainer.predict"]`` or a ``from`` import there."""

    def __setattr__(self, name, value):
        if name in _API_NAMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
