"""ema: keep an exponential moving average of the weights; evaluate (and pick the best) with it.

UP's top-level ``ema: {enable, ema_type, kwargs: {decay, warmup}}`` section is turned into
this hook by config resolution, so both spellings end up here.
"""
import logging
from typing import Optional

from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")


@HOOKS.register("ema")
class EMAHook(Hook):
    """Model EMA (UP linear/exp): updated every optimizer update, swapped in for evaluation."""

    priority = "ABOVE_NORMAL"  # average in before loggers/checkpoint hooks act on after_update

    def __init__(self, enable: bool = True, ema_type: str = "linear", decay: float = 0.9999,
                 warmup: Optional[int] = None, inner_T: int = 1):
        super().__init__()
        if ema_type not in ("linear", "exp"):
            raise ConfigError("ema_type", f"unknown {ema_type!r}", "use linear or exp")
        if not 0.0 <= decay < 1.0:
            raise ConfigError("decay", f"must be in [0, 1), got {decay}")
        if warmup is not None and warmup < 1:
            raise ConfigError("warmup", f"must be >= 1, got {warmup}")
        if inner_T < 1:
            raise ConfigError("inner_T", f"must be >= 1, got {inner_T}")
        self.enable = enable
        self.kwargs = dict(decay=decay, ema_type=ema_type, warmup=warmup, inner_T=inner_T)
        self.ema = None
        self._swap = None

    def _ensure(self, trainer):
        if self.ema is None and self.enable:
            from ..engine.ema import ModelEMA

            self.ema = ModelEMA(trainer.module, **self.kwargs)
            trainer.ema = self.ema  # the trainer saves ckpt["ema"] = ema.state_dict()
        return self.ema

    def before_train(self, trainer):
        # After restore(): a fresh run starts the average from the (maybe pretrained) weights.
        if self._ensure(trainer) is not None:
            log.info("ema: %s decay=%g warmup=%s, %d updates so far", self.ema.ema_type, self.ema.decay,
                     self.ema.warmup, self.ema.updates)

    def after_load_checkpoint(self, trainer, ckpt):
        # restore() runs before before_train, when trainer.ema may not exist yet: load here.
        saved = ckpt.get("ema")
        if saved is not None and self._ensure(trainer) is not None:
            self.ema.load_state_dict(saved)
        elif self.enable and ckpt.get("optimizer") is not None:
            log.warning("ema: the checkpoint has no EMA weights; averaging restarts from the loaded weights")

    def after_update(self, trainer, iteration):
        if self.ema is not None and trainer.did_update:
            self.ema.update(trainer.module)

    def before_eval(self, trainer):
        if self.ema is None:
            return
        from ..engine.ema import SwappedWeights

        self._swap = SwappedWeights(trainer.module, self.ema.model)
        self._swap.swap_in()

    def after_eval(self, trainer, metrics):
        if self._swap is not None:
            self._swap.swap_out()
            self._swap = None

    def on_exception(self, trainer, exc):
        self.after_eval(trainer, None)  # never leave the EMA weights in the model
