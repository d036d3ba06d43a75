"""LAMB (You et al., "Large Batch Optimization for Deep Learning", 2019), NVIDIA's NVLAMB variant
as UP ships it, in plain PyTorch.

Per update:

1. all gradients are divided by ``max(1, ||g||_global / max_grad_norm)`` (global norm clipping);
2. Adam moments ``m = b1 m + (1 - b1) g`` (``grad_averaging: false``: ``+ g``), ``v = b2 v + (1 - b2) g^2``,
   bias-corrected when ``bias_correction`` is true;
3. ``u = m_hat / (sqrt(v_hat) + eps) + weight_decay * w``;
4. trust ratio ``r = ||w|| / ||u||`` (1 when either norm is 0; at most 1 with ``trust_clip``), applied
   only to parameters with weight decay unless ``always_adapt``;
5. ``w -= lr * r * u``.

Gradients are left untouched (the clipping works on a scaled copy). The step count is kept per
parameter, like torch's Adam, so a parameter that got no gradient is not bias-corrected as if it had.
"""
import torch
from torch.optim import Optimizer


class LAMB(Optimizer):
    def __init__(self, params, lr: float = 1e-3, bias_correction: bool = True, betas=(0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01, grad_averaging: bool = True,
                 max_grad_norm: float = 1.0, trust_clip: bool = False, always_adapt: bool = False):
        if lr < 0 or eps < 0 or weight_decay < 0 or max_grad_norm <= 0:
            raise ValueError("lr, eps and weight_decay must be >= 0 and max_grad_norm > 0")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=tuple(betas), eps=eps,
                        weight_decay=weight_decay, grad_averaging=grad_averaging, max_grad_norm=max_grad_norm,
                        trust_clip=trust_clip, always_adapt=always_adapt)
        super().__init__(params, defaults)

    def _clip_divisor(self):
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return None
        if any(g.is_sparse for g in grads):
            raise RuntimeError("LAMB does not support sparse gradients")
        # at least float32 per tensor (fp16 squares overflow), summed in the widest dtype present
        norms = [torch.linalg.vector_norm(g, dtype=torch.promote_types(g.dtype, torch.float32)) for g in grads]
        wide = max((n.dtype for n in norms), key=lambda d: torch.finfo(d).bits)
        total = torch.linalg.vector_norm(torch.stack([n.to(wide) for n in norms]))
        limit = self.defaults["max_grad_norm"]
        return torch.clamp(total / limit, min=1.0)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        divisor = self._clip_divisor()
        if divisor is None:
            return loss
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            first_weight = 1.0 - beta1 if group["grad_averaging"] else 1.0
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad / divisor.to(p.grad.device, p.grad.dtype)
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(grad, alpha=first_weight)
                v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                if group["bias_correction"]:
                    c1, c2 = 1.0 - beta1 ** state["step"], 1.0 - beta2 ** state["step"]
                else:
                    c1, c2 = 1.0, 1.0
                update = (m / c1) / ((v / c2).sqrt() + group["eps"])
                wd = group["weight_decay"]
                if wd != 0:
                    update.add_(p, alpha=wd)
                if wd != 0 or group["always_adapt"]:
                    w_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
                    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                    if group["trust_clip"]:
                        ratio = torch.clamp(ratio, max=1.0)
                    update.mul_(ratio)
                p.add_(update, alpha=-group["lr"])
        return loss
