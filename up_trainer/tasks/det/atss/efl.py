"""Equalized Focal Loss (Li et al. 2022, UP's ``equalized_focal_loss``) and its quality
variant (UP's ``equalized_quality_focal_loss``) for long-tailed detection.

Each class c gets its own focusing factor ``gamma_c = gamma + s * (1 - r_c)`` and weight
``gamma_c / gamma``, where ``r_c`` (``pos_neg``) is the ratio of the accumulated absolute
gradients of c's positive and negative logits, clamped to [0, 1]: a rare class (little positive
gradient) is focused and weighted up. With ``p`` the sigmoid of a logit and ``t`` its 0/1
target, ``p_t = p t + (1 - p)(1 - t)``:

- EFL: ``alpha_t * -log(p_t) * (1 - p_t)^gamma_c * gamma_c / gamma``;
- EQFL: negatives ``BCE(x, 0) * p^gamma_c``, a positive at its class ``BCE(x, q) * |q - p|^gamma_c``
  (``q`` its IoU target), all times ``gamma_c / gamma``.

Summed; the caller divides. The gradients come from the ``gradient_collector`` hook, which calls
:meth:`collect_grad` with the gradient of each level's class map (last level first, as the
backward pass runs): once all ``levels`` are in, each anchor's class gradients are paired with
its own targets of the last forward and added to ``pos_grad`` / ``neg_grad`` (summed over
processes). The three statistics are buffers: they are saved in checkpoints and resume.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class EqualizedFocalLoss(nn.Module):
    def __init__(self, num_classes, gamma=2.0, alpha=0.25, scale_factor=8.0, levels=5, quality=False,
                 class_first=False):
        super().__init__()
        self.num_classes, self.gamma, self.alpha, self.scale_factor = num_classes, gamma, alpha, scale_factor
        self.levels, self.quality, self.class_first = levels, quality, class_first
        self.register_buffer("pos_grad", torch.zeros(num_classes))
        self.register_buffer("neg_grad", torch.zeros(num_classes))
        self.register_buffer("pos_neg", torch.ones(num_classes))
        self._grads, self._cache = [], None

    def focus(self):
        """(gamma_c, weight_c) per class from the gradient ratio so far."""
        gamma_c = self.gamma + self.scale_factor * (1 - self.pos_neg)
        return gamma_c, gamma_c / self.gamma

    def forward(self, logits, labels, quality=None):
        """Summed loss. ``logits`` [K, C]; ``labels`` [K] (0 background, 1..C, -1 ignored);
        ``quality`` [K] the positives' IoU targets (EQFL)."""
        onehot = torch.zeros_like(logits)
        pos = (labels > 0).nonzero()[:, 0]
        onehot[pos, labels[pos] - 1] = 1.0
        keep = labels >= 0
        self._cache = (onehot.detach(), keep)
        x, t = logits[keep], onehot[keep]
        gamma_c, weight = (v.detach().to(x.dtype) for v in self.focus())
        p = x.sigmoid()
        if self.quality:
            loss = F.binary_cross_entropy_with_logits(x, torch.zeros_like(x), reduction="none") * p.pow(gamma_c)
            kept_labels = labels[keep]
            i = (kept_labels > 0).nonzero()[:, 0]
            c = kept_labels[i] - 1
            q = quality[keep][i].to(x.dtype)
            loss = loss.index_put((i, c), F.binary_cross_entropy_with_logits(x[i, c], q, reduction="none")
                                  * (q - p[i, c]).abs().pow(gamma_c[c]))
            return (loss * weight).sum()
        p_t = p * t + (1 - p) * (1 - t)
        loss = F.binary_cross_entropy_with_logits(x, t, reduction="none") * (1 - p_t).pow(gamma_c) * weight
        if self.alpha >= 0:
            loss = (self.alpha * t + (1 - self.alpha) * (1 - t)) * loss
        return loss.sum()

    @torch.no_grad()
    def collect_grad(self, grad):
        """One level's class-map gradient [N, A*C, H, W]; the last of ``levels`` updates the ratio."""
        self._grads.append(grad.detach())
        if len(self._grads) < self.levels:
            return
        grads, self._grads = self._grads[::-1], []
        if self._cache is None:
            return
        flat = []
        for g in grads:
            n, ac, h, w = g.shape
            a = ac // self.num_classes
            g = g.view(n, self.num_classes, a, h, w).permute(0, 3, 4, 2, 1) if self.class_first else \
                g.view(n, a, self.num_classes, h, w).permute(0, 3, 4, 1, 2)
            flat.append(g.reshape(n, h * w * a, self.num_classes))
        onehot, keep = self._cache
        grad = torch.cat(flat, 1).reshape(-1, self.num_classes).float()
        if grad.shape[0] != keep.shape[0]:
            raise RuntimeError(f"collect_grad: {grad.shape[0]} anchors' gradients for {keep.shape[0]} anchors of the "
                               "loss: hook_module must name the class prediction of every level")
        grad, target = grad.abs()[keep], onehot[keep].float()
        pos, neg = (grad * target).sum(0), (grad * (1 - target)).sum(0)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(pos), dist.all_reduce(neg)
        self.pos_grad += pos
        self.neg_grad += neg
        self.pos_neg.copy_(torch.clamp(self.pos_grad / (self.neg_grad + 1e-10), min=0, max=1))
