"""The mimic losses against hand computations with the math module (UP's formulas)."""
import math

import pytest
import torch

from up_trainer.distill.losses import CELoss, KDLoss, KLLoss, L2Loss


def softmax(row, T=1.0):
    e = [math.exp(v / T) for v in row]
    return [v / sum(e) for v in e]


S = [[1.0, 2.0, 0.5], [0.2, -1.0, 3.0]]
T_ = [[2.0, 0.0, 1.0], [1.0, 1.0, -2.0]]


def kd_by_hand(s_rows, t_rows, T):
    total = 0.0
    for s, t in zip(s_rows, t_rows):
        p, q = softmax(t, T), softmax(s, T)
        total += sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q))
    return total / len(s_rows) * T * T


@pytest.mark.parametrize("T", [1.0, 4.0])
def test_kd_loss_is_hintons_kl_times_t_squared(T):
    got = KDLoss(T=T, loss_weight=0.5)([torch.tensor(S)], [torch.tensor(T_)])
    assert got.item() == pytest.approx(0.5 * kd_by_hand(S, T_, T), rel=1e-5)


def test_kd_loss_sums_over_module_pairs():
    pair = [torch.tensor(S)], [torch.tensor(T_)]
    one = KDLoss(T=2.0)(*pair)
    two = KDLoss(T=2.0)(pair[0] * 2, pair[1] * 2)
    assert two.item() == pytest.approx(2 * one.item(), rel=1e-6)


def test_kl_loss_is_ups_relu_softmax_kl_without_temperature():
    relu = lambda rows: [[max(v, 0.0) for v in r] for r in rows]  # noqa: E731
    want = kd_by_hand(relu(S), relu(T_), 1.0)  # batch-mean KL of the ReLU'd outputs
    got = KLLoss()([torch.tensor(S)], [torch.tensor(T_)])
    assert got.item() == pytest.approx(want, rel=1e-5)


def test_kl_loss_l2_norm_form():
    s, t = [[1.0, 2.0, 3.0]], [[3.0, 1.0, 0.0]]
    sn, tn = [v / 6.0 for v in s[0]], [v / 4.0 for v in t[0]]
    want = sum(b * math.log((b + 1e-6) / (a + 1e-6)) for a, b in zip(sn, tn))
    got = KLLoss(norm="l2")([torch.tensor(s)], [torch.tensor(t)])
    assert got.item() == pytest.approx(want, rel=1e-5)


def test_ce_loss_is_soft_target_cross_entropy():
    want = 0.0
    for s, t in zip(S, T_):
        p, q = softmax(t, 2.0), softmax(s, 2.0)
        want += -sum(pi * math.log(qi) for pi, qi in zip(p, q))
    got = CELoss(T=2.0)([torch.tensor(S)], [torch.tensor(T_)])
    assert got.item() == pytest.approx(want / 2, rel=1e-5)


def test_l2_loss_means_over_elements_or_batch():
    s = torch.tensor([[[[1.0, 2.0]], [[0.0, 1.0]]]])  # 1 x 2 x 1 x 2
    t = torch.zeros_like(s)
    assert L2Loss()([s], [t]).item() == pytest.approx((1 + 4 + 0 + 1) / 4)
    assert L2Loss(batch_mean=True)([s], [t]).item() == pytest.approx(6.0)
    # feat_norm: each sample's flattened output scaled to unit length first
    norm = L2Loss(feat_norm=True, batch_mean=True)([s], [s * 3]).item()
    assert norm == pytest.approx(0.0, abs=1e-6)


def test_teacher_side_gets_no_gradient_and_half_inputs_give_float32():
    s = torch.tensor(S, dtype=torch.bfloat16, requires_grad=True)
    t = torch.tensor(T_, dtype=torch.bfloat16, requires_grad=True)
    loss = KDLoss(T=2.0)([s], [t])
    assert loss.dtype == torch.float32
    loss.backward()
    assert s.grad is not None and t.grad is None
