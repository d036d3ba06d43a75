"""up-trainer: YAML-driven training for image classification and object detection.

The Python API (``up_trainer.load_config``, ``train``, ``evaluate``, ``predict``, ``export``,
``build_trainer``, ``Hook``, ``ConfigError``, ...) lives in :mod:`up_trainer.api`; its names are
reachable here, imported on first use so that ``up --help`` imports nothing it does not need.
"""
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
