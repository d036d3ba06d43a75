"""precise_bn: re-estimate the BatchNorm statistics of the evaluated weights over a few training
batches before each evaluation (MMPretrain's ``PreciseBNHook``, detectron2's ``PreciseBN``).

Why: a BatchNorm's running statistics are an exponential average over past updates, so they
describe weights dozens of updates old. When the weights still move fast (the first epochs of
a run from scratch, a few hundred images) the evaluated model normalises with statistics that
no longer fit it, and the evaluation says far less than the weights can do (YOLOX on the
small-data regime after one epoch: validation loss_obj 59 with the running statistics, 4.7
with re-estimated ones; docs/detection/small_data.rst).

What it changes, and what not:

- the statistics it estimates stay in the evaluated copy: the EMA weights when the ``ema``
  hook is on (written into the average, which ``ema`` swaps in before this hook runs), else
  the model's own running statistics. So ``ckpt_best.pth`` and ``up eval`` of any checkpoint
  give the numbers logged during training. ``num_batches_tracked`` and the momentum are left
  as they were;
- running statistics never enter the training forward (a BatchNorm in training mode
  normalises with the batch's own statistics), so the weights, gradients and losses of the run
  are those of the run without this hook, bitwise;
- the batches are drawn from the training set (its current pipeline) by their own generator
  seeded by (seed, epoch, iteration), and every global generator (torch, numpy, random) is
  restored afterwards: the training stream of batches and augmentations is unchanged, and a
  resumed run estimates the same statistics.
"""
import logging
import random

import numpy as np
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ..data.model_input import batch_to_model
from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")


def batch_norms(module):
    """{state-dict prefix: BatchNorm} of every BatchNorm that keeps running statistics."""
    return {name: m for name, m in module.named_modules() if isinstance(m, _BatchNorm) and m.track_running_stats}


@HOOKS.register("precise_bn")
class PreciseBNHook(Hook):
    """Before each evaluation, the BatchNorm statistics of the evaluated weights become the plain
    average over ``num_batches`` training batches, computed with those weights."""

    priority = "LOW"  # after ema's before_eval (ABOVE_NORMAL): the EMA weights are in the model

    def __init__(self, num_batches: int = 10, enable: bool = True):
        super().__init__()
        if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 1:
            raise ConfigError("num_batches", f"must be an integer >= 1, got {num_batches!r}")
        self.num_batches = num_batches
        self.enable = bool(enable)
        self._warned = False

    def before_eval(self, trainer):
        loaders = getattr(trainer, "loaders", None)
        if not self.enable or loaders is None or loaders.train_set is None or len(loaders.train_set) == 0:
            return
        bns = batch_norms(trainer.module)
        if not bns:
            if not self._warned:
                log.warning("precise_bn: the model has no BatchNorm with running statistics; nothing to estimate")
                self._warned = True
            return
        with _GlobalRngKept():
            self._estimate(trainer, bns, self._batches(trainer))
        ema = getattr(trainer, "ema", None)
        if ema is not None:  # the EMA weights are swapped in: keep the estimate in the average
            for prefix, bn in bns.items():
                ema.model[f"{prefix}.running_mean"].copy_(bn.running_mean)
                ema.model[f"{prefix}.running_var"].copy_(bn.running_var)

    def _batches(self, trainer):
        """``num_batches`` training batches (fewer when the set is smaller), drawn without
        replacement from the training set by a generator of their own."""
        loaders, st = trainer.loaders, trainer.state
        dataset, bs = loaders.train_set, loaders.cfg["batch_size"]
        seed = ((loaders.seed * 1_000_003 + st.epoch) * 10_000_019 + st.iter) % (2**63)
        torch.default_generator.manual_seed(seed)  # the transforms draw from the global generator (restored after)
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
        order = order[:self.num_batches * bs]
        collate = loaders._collate(dataset)  # the training loader's collate (padding alignment included)
        for start in range(0, len(order), bs):
            batch = collate([dataset[i] for i in order[start:start + bs]])
            yield batch_to_model(batch, trainer.device, trainer.memory_format)

    @torch.no_grad()
    def _estimate(self, trainer, bns, batches):
        module = trainer.module
        modes = {m: m.training for m in module.modules()}
        kept = {bn: (bn.momentum, bn.num_batches_tracked.clone()) for bn in bns.values()}
        module.eval()  # dropout and the like as evaluated; only the BatchNorms gather statistics
        for bn in bns.values():
            bn.train()
            bn.reset_running_stats()
            bn.momentum = None  # cumulative: the plain average over the batches
        seen = 0
        try:
            autocast = trainer.optim.autocast() if trainer.optim else torch.autocast("cpu", enabled=False)
            with autocast:
                for batch in batches:
                    if isinstance(batch, dict):
                        batch = {k: v for k, v in batch.items() if k != "target"}  # no loss needed
                    module(batch)
                    seen += 1
        finally:
            for bn, (momentum, tracked) in kept.items():
                bn.momentum = momentum
                bn.num_batches_tracked.copy_(tracked)
            for m, training in modes.items():
                m.train(training)
        log.info("precise_bn: BatchNorm statistics of %d layers re-estimated over %d training batches",
                 len(bns), seen)


class _GlobalRngKept:
    """Restores torch's, numpy's and Python's global generators on exit."""

    def __enter__(self):
        self.torch_state = torch.get_rng_state()
        self.cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self.np_state, self.py_state = np.random.get_state(), random.getstate()

    def __exit__(self, *exc):
        torch.set_rng_state(self.torch_state)
        if self.cuda_states is not None:
            torch.cuda.set_rng_state_all(self.cuda_states)
        np.random.set_state(self.np_state)
        random.setstate(self.py_state)
        return False
