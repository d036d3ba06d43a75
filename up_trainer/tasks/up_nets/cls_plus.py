"""UP's long-tail classification parts: the ``norm_linear`` cosine classifier and the
``softmax_eql`` / ``softmax_eqlv2`` equalization losses fed by the ``gradient_collector`` hook.

``norm_linear``: logits = temperature x cos(feature, class weight). The weight is stored as UP
stores it (in_features x out_features, columns of unit norm at start) so UP weights load.

``softmax_eql`` (Tan et al., "Equalization Loss", softmax form): each non-target logit j of a
sample of class y is raised by tau x log(g_j / g_y), where g accumulates the absolute logit
gradients the gradient_collector hook reports (``indicator: pos``: the gradients each class
received as the target; ``neg``: as a non-target; ``pos_and_neg``: pos/neg ratio + neg). Rare
classes (small g) thus get their competitors' logits pushed down. Before any gradient is
collected every g is clamped to ``eps`` and the loss is plain cross-entropy. ``softmax_eqlv2``
adds tau x log(g_j / sum g) to every logit. The accumulators are buffers: they are saved in
checkpoints and restored on resume.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ConfigError, DataError

INDICATORS = ("pos", "neg", "pos_and_neg")


class NormLinear(nn.Module):
    def __init__(self, in_features, out_features, temperature=30.0):
        super().__init__()
        self.temperature = temperature
        weight = torch.empty(in_features, out_features).uniform_(-1, 1)
        self.weight = nn.Parameter(weight / weight.norm(dim=0, keepdim=True).clamp_min(1e-12))

    def forward(self, x):
        return F.normalize(x, dim=1) @ F.normalize(self.weight, dim=0) * self.temperature

    def extra_repr(self):
        return f"in_features={self.weight.shape[0]}, out_features={self.weight.shape[1]}, " \
               f"temperature={self.temperature}"


class SoftmaxEQL(nn.Module):
    def __init__(self, num_classes, indicator="pos", tau=1.0, eps=1e-4, weight=1.0, v2=False):
        super().__init__()
        self.num_classes, self.indicator, self.tau, self.eps, self.weight, self.v2 = \
            num_classes, indicator, tau, eps, weight, v2
        self.register_buffer("pos_grad", torch.zeros(num_classes))
        self.register_buffer("neg_grad", torch.zeros(num_classes))
        self.register_buffer("pos_neg", torch.ones(num_classes))
        self._targets = None

    def class_weights(self):
        if self.indicator == "pos":
            return self.pos_grad
        if self.indicator == "neg":
            return self.neg_grad
        return self.pos_neg + self.neg_grad

    def adjusted_logits(self, logits, one_hot):
        g = self.class_weights().detach().to(logits.dtype)
        if self.v2:
            share = g / (g.sum() + self.eps)
            return logits + torch.log(share ** self.tau + 1e-9)[None, :]
        g = g.clamp(min=self.eps)
        labels = one_hot.argmax(1)
        ratio = torch.log(g[None, :] / g[labels][:, None]) * self.tau  # log((g_j / g_y) ** tau)
        return logits + ratio * (1 - one_hot)

    def forward(self, logits, label):
        if label.dim() != 1 and not self.v2:
            raise DataError("softmax_eql needs one class per image; this batch has mixed (soft) labels: drop the "
                            "batch_fn mixup/cutmix or use softmax_eqlv2")
        one_hot = F.one_hot(label, self.num_classes).to(logits.dtype) if label.dim() == 1 else label.to(logits.dtype)
        self._targets = one_hot.detach()
        target = label if label.dim() == 1 else one_hot
        return F.cross_entropy(self.adjusted_logits(logits, one_hot), target) * self.weight

    @torch.no_grad()
    def collect_grad(self, grad):
        """Accumulate |d loss / d logits| per class, split into the target's and the others'
        (called by the gradient_collector hook after each backward; summed over ranks)."""
        if self._targets is None:
            return
        grad = grad.detach().abs().to(self.pos_grad.dtype)
        pos = (grad * self._targets).sum(0)
        neg = (grad * (1 - self._targets)).sum(0)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(pos), torch.distributed.all_reduce(neg)
        self.pos_grad += pos
        self.neg_grad += neg
        self.pos_neg.copy_(self.pos_grad / (self.neg_grad + 1e-10))


def read_norm_linear(kw, in_plane, out_plane):
    kw.take("in_features", in_plane, types=int, only=in_plane)
    kw.take("out_features", out_plane, types=int, only=out_plane)
    temperature = kw.take("tempearture", 30.0, types=float)  # UP's spelling
    kw.done()
    return lambda n_in, n_out: NormLinear(n_in, n_out, temperature)


def read_eql(kind, kw, num_classes):
    n = kw.take("num_classes", types=int)
    if n != num_classes:
        raise ConfigError(kw.at("num_classes"), f"{n} but the head has {num_classes} classes")
    indicator = kw.take("indicator", "pos", types=str, check=lambda v: None if v in INDICATORS
                        else f"expected one of {', '.join(INDICATORS)}")
    weight = kw.take("loss_weight", 1.0, types=float)
    tau = kw.take("tau", 1.0, types=float)
    eps = kw.take("eps", 1e-4, types=float, check=lambda v: None if v > 0 and math.isfinite(v) else "must be > 0")
    kw.done()
    return SoftmaxEQL(n, indicator, tau, eps, weight, v2=kind == "softmax_eqlv2")
