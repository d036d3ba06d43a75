"""Mimic losses under UP's names and kwargs. Each takes the list of student outputs and the
list of teacher outputs (one pair per named module) and returns one scalar, in float32
whatever precision the nets ran in.

* ``kd_loss(T, loss_weight)``: Hinton's distillation, per pair the batch mean of
  KL(softmax(t/T) || softmax(s/T)), times T**2.
* ``kl_loss(norm, loss_weight)``: UP's KL on ReLU'd outputs: ``softmax`` is the batch-mean
  KL of softmax(relu(t)) from log_softmax(relu(s)); ``l2`` compares relu(s) and relu(t) each
  divided by its total sum. No temperature (that is kd_loss).
* ``ce_loss(T, loss_weight)``: batch mean of the cross-entropy of softmax(s/T) against
  softmax(t/T).
* ``l2_loss(feat_norm, batch_mean, loss_weight)``: summed squared difference, divided by the
  batch size (``batch_mean``) or by the element count; ``feat_norm`` first L2-normalizes each
  sample's flattened output. With ``masks`` (one per pair, broadcast over the output), each
  squared difference is weighted by the mask and the sum divided by the mask's sum instead of
  the element count (UP's rule; an all-zero mask leaves the sum undivided, and zero).
* ``bce_loss(T, batch_mean, loss_weight)``: binary cross-entropy of the student's
  sigmoid(s / T) against the teacher's sigmoid(t / T), for dense scores (FRS); with ``masks``
  weighted and normalised as ``l2_loss``'s. (UP's FRS names this loss without shipping one.)
"""
import torch
import torch.nn.functional as F
from torch import nn


def _pairs(student, teacher):
    for s, t in zip(student, teacher):
        yield s.float(), t.float().detach()


class KDLoss(nn.Module):
    def __init__(self, T=1.0, loss_weight=1.0):
        super().__init__()
        self.T, self.loss_weight = float(T), float(loss_weight)

    def forward(self, student, teacher):
        total = 0.0
        for s, t in _pairs(student, teacher):
            log_p = F.log_softmax(s / self.T, dim=1)
            q = F.softmax(t / self.T, dim=1)
            total = total + F.kl_div(log_p, q, reduction="sum") / s.shape[0] * self.T ** 2
        return total * self.loss_weight


class KLLoss(nn.Module):
    def __init__(self, norm="softmax", loss_weight=1.0):
        super().__init__()
        self.norm, self.loss_weight = norm, float(loss_weight)

    def forward(self, student, teacher):
        total = 0.0
        for s, t in _pairs(student, teacher):
            s, t = F.relu(s), F.relu(t)
            if self.norm == "softmax":
                total = total + F.kl_div(F.log_softmax(s, dim=1), F.softmax(t, dim=1), reduction="batchmean")
            else:  # UP's l2 form: both normalized by their total sum, 1e-6 guarding the logarithm
                tn, sn = t / t.sum(), s / s.sum()
                total = total + torch.sum(tn * torch.log((tn + 1e-6) / (sn + 1e-6)))
        return total * self.loss_weight


class CELoss(nn.Module):
    def __init__(self, T=1.0, loss_weight=1.0):
        super().__init__()
        self.T, self.loss_weight = float(T), float(loss_weight)

    def forward(self, student, teacher):
        total = 0.0
        for s, t in _pairs(student, teacher):
            total = total + torch.mean(torch.sum(-F.softmax(t / self.T, 1) * F.log_softmax(s / self.T, 1), 1))
        return total * self.loss_weight


def _reduce(elementwise, mask, batch_mean):
    """Sum of the (masked) element losses over the batch size, the mask's sum or the count."""
    if mask is None:
        loss = elementwise.sum()
        return loss / elementwise.shape[0] if batch_mean else loss / elementwise.numel()
    mask = mask.float().detach()
    loss = torch.sum(elementwise * mask)
    if batch_mean:
        return loss / elementwise.shape[0]
    total = mask.sum()
    return loss / total if total != 0 else loss


def _masks(masks, student):
    if masks is None:
        return [None] * len(student)
    if len(masks) != len(student):
        raise ValueError(f"{len(masks)} masks for {len(student)} outputs")
    return masks


class L2Loss(nn.Module):
    def __init__(self, feat_norm=False, batch_mean=False, loss_weight=1.0):
        super().__init__()
        self.feat_norm, self.batch_mean, self.loss_weight = feat_norm, batch_mean, float(loss_weight)

    def forward(self, student, teacher, masks=None):
        total = 0.0
        for (s, t), mask in zip(_pairs(student, teacher), _masks(masks, student)):
            if s.shape != t.shape:
                raise ValueError(f"student output {tuple(s.shape)} and teacher output {tuple(t.shape)} differ")
            if self.feat_norm:
                s = F.normalize(s.reshape(s.shape[0], -1), dim=1)
                t = F.normalize(t.reshape(t.shape[0], -1), dim=1)
                mask = None if mask is None else mask.reshape(s.shape[0], -1)
            total = total + _reduce((s - t) ** 2, mask, self.batch_mean)
        return total * self.loss_weight


class BCELoss(nn.Module):
    def __init__(self, T=1.0, batch_mean=False, loss_weight=1.0):
        super().__init__()
        self.T, self.batch_mean, self.loss_weight = float(T), batch_mean, float(loss_weight)

    def forward(self, student, teacher, masks=None):
        total = 0.0
        for (s, t), mask in zip(_pairs(student, teacher), _masks(masks, student)):
            element = F.binary_cross_entropy_with_logits(s / self.T, torch.sigmoid(t / self.T), reduction="none")
            total = total + _reduce(element, mask, self.batch_mean)
        return total * self.loss_weight


LOSSES = {"kd_loss": KDLoss, "kl_loss": KLLoss, "ce_loss": CELoss, "l2_loss": L2Loss, "bce_loss": BCELoss}


def build_loss(spec):
    return LOSSES[spec.type](**spec.kwargs)
