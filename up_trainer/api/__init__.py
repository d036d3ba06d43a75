"""The Python API: what the ``up`` command does, as functions (docs/python_api.rst).

    import up_trainer
    cfg = up_trainer.load_config("configs/cls/digits_resnet18.yaml", opts=["trainer.max_epoch=2"])
    result = up_trainer.train(cfg, work_dir="runs/digits")
    up_trainer.predict(cfg, result.checkpoint, ["a.png", pil_image, tensor])

Each function runs the CLI's own code; errors are raised (:class:`ConfigError` with the key
path, :class:`CheckpointError`, :class:`DataError`), never turned into an exit; and a call
leaves the process as it found it (api/isolation.py). Heavy modules (torch) are imported
when a function is called, not here.
"""
from ..engine.hooks import EVENTS, Hook
from ..errors import CheckpointError, ConfigError, DataError, TrainingInterrupted, UserError
from .config import Config, load_config
from .inference import export, predict
from .training import TrainResult, build_trainer, evaluate, train

__all__ = ["load_config", "train", "evaluate", "predict", "export", "build_trainer", "Config", "TrainResult",
           "Hook", "EVENTS", "ConfigError", "CheckpointError", "DataError", "TrainingInterrupted", "UserError"]
