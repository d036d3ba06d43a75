"""Exponential moving average of the model weights (UP's ``linear`` and ``exp`` EMA).

The average is a state dict (parameters and buffers) kept beside the model, updated after
each optimizer update. ``state_dict()["model"]`` is that average, in the layout of
``model.state_dict()``, so ``up eval`` can load it as plain weights.
"""
import math

import torch


class ModelEMA:
    """EMA weights. ``linear`` (UP): decay_t = min(decay, (1 + t) / (warmup + t)).
    ``exp`` (UP/YOLOv5): decay_t = decay * (1 - exp(-t / warmup)). ``t`` counts updates
    (0-based); with ``inner_T`` > 1 only every inner_T-th update averages, with decay ** inner_T.
    """

    def __init__(self, module, decay=0.9999, ema_type="linear", warmup=None, inner_T=1):
        self.ema_type = ema_type
        self.decay = decay ** inner_T if inner_T > 1 else decay
        self.warmup = warmup if warmup is not None else (1 if ema_type == "linear" else 2000)
        self.inner_T = inner_T
        self.updates = 0
        self.model = {k: v.detach().clone() for k, v in module.state_dict().items()}
        from ..quant import quantizer_state_keys

        # fake-quant ranges and scales describe the live model's tensors: they follow it, as counters do
        self.follows = quantizer_state_keys(module)

    def decay_at(self, t):
        if self.ema_type == "exp":
            return self.decay * (1 - math.exp(-t / self.warmup))
        return min(self.decay, (1 + t) / (self.warmup + t))

    @torch.no_grad()
    def update(self, module):
        """Average ``module`` in; call once per optimizer update."""
        t = self.updates
        self.updates += 1
        if t % self.inner_T:
            return
        d = self.decay_at(t)
        current = module.state_dict()
        for k, avg in self.model.items():
            v = current[k].detach()
            if avg.dtype.is_floating_point and k not in self.follows:
                avg.mul_(d).add_(v.to(avg.dtype), alpha=1 - d)
            else:  # counters such as BatchNorm's num_batches_tracked follow the model
                avg.copy_(v)

    def state_dict(self):
        return {"model": self.model, "updates": self.updates, "decay": self.decay, "ema_type": self.ema_type,
                "warmup": self.warmup, "inner_T": self.inner_T}

    def load_state_dict(self, state):
        missing = set(self.model) - set(state["model"])
        if missing:
            from ..errors import CheckpointError

            raise CheckpointError(f"the checkpoint's EMA weights lack {len(missing)} keys, e.g. {sorted(missing)[:3]}")
        for k, avg in self.model.items():
            avg.copy_(state["model"][k])
        self.updates = state["updates"]


class SwappedWeights:
    """Context to run with the EMA weights loaded into ``module``; restores the raw ones
    bitwise (in-place copies, so optimizer references stay valid)."""

    def __init__(self, module, weights):
        self.module, self.weights, self.saved = module, weights, None

    def swap_in(self):
        self.saved = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        self.module.load_state_dict(self.weights)

    def swap_out(self):
        if self.saved is not None:
            self.module.load_state_dict(self.saved)
            self.saved = None
