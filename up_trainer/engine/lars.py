"""LARS (You et al., "Large Batch Training of Convolutional Networks", 2017) as UP defines it
(``type: LARS``, UP's self-supervised recipes), in plain PyTorch.

Per parameter ``w`` with gradient ``g``, per update:

1. ``local = eta * ||w|| / (||g|| + weight_decay * ||w||)``: the norm of the raw gradient plus
   the decay term's norm, as UP computes it (not the norm of their sum);
2. ``d = g + weight_decay * w``;
3. momentum: the buffer starts as ``d``, then ``buf = momentum * buf + (1 - dampening) * d``;
   ``d = buf`` (``nesterov``: ``d = d + momentum * buf``);
4. ``w -= lr * local * d``.

A parameter whose norm is 0 (a zero-initialised bias) gets ``local = 0`` and stays where it
is, as in UP. Where UP divides by a zero gradient norm (and writes NaN into the weights) the
step here uses ``local = 0``. Gradients are left untouched (UP adds the decay term into
``p.grad`` in place; the update is the same).
"""
import torch
from torch.optim import Optimizer


class LARS(Optimizer):
    def __init__(self, params, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, eta: float = 0.001, nesterov: bool = False):
        for name, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay), ("eta", eta)):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("nesterov needs a momentum > 0 and dampening 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      eta=eta, nesterov=nesterov))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            wd, momentum, eta = group["weight_decay"], group["momentum"], group["eta"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad
                w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(d)
                if wd != 0:
                    d = d.add(p, alpha=wd)
                    g_norm = g_norm + wd * w_norm
                local = torch.where(g_norm > 0, eta * w_norm / g_norm, torch.zeros_like(g_norm))
                if momentum != 0:
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        buf = state["momentum_buffer"] = d.clone()
                    else:
                        buf = state["momentum_buffer"]
                        buf.mul_(momentum).add_(d, alpha=1 - group["dampening"])
                    d = d.add(buf, alpha=momentum) if group["nesterov"] else buf
                p.sub_(d * (local * group["lr"]))
        return loss
