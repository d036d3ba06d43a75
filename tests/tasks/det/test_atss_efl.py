"""Equalized focal loss (UP's equalized_focal_loss / equalized_quality_focal_loss) in the ATSS
family: values against hand computations, the gradient statistics fed by the
gradient_collector hook, and those statistics saved and restored with the model."""
import math
import os
import types

import pytest
import torch
import yaml

from up_trainer.errors import ConfigError
from up_trainer.hooks.gradient_collector import GradientCollector
from up_trainer.tasks.det.atss import EqualizedFocalLoss
from up_trainer.tasks.net import build_model
from up_trainer.tasks.up_nets import check_up_net
from conftest import UP_FIXTURES  # noqa: E402


def sig(x):
    return 1 / (1 + math.exp(-x))


def loss_with_ratio(**kw):
    loss = EqualizedFocalLoss(2, gamma=2.0, scale_factor=4.0, **kw)
    loss.pos_neg.copy_(torch.tensor([1.0, 0.25]))  # class 1 rare: gamma 2 + 4 x 0.75 = 5, weight 2.5
    return loss


LOGITS, LABELS = torch.tensor([[0.0, 1.0]]), torch.tensor([1])  # one anchor, positive for class 1 (channel 0)


def test_efl_by_hand():
    got = loss_with_ratio(alpha=0.25)(LOGITS, LABELS)
    p1 = sig(1.0)
    want = 0.25 * -math.log(0.5) * 0.5 ** 2 * 1.0 + 0.75 * -math.log(1 - p1) * p1 ** 5 * 2.5
    assert got.item() == pytest.approx(want, rel=1e-6)
    # with pos_neg all 1 it is the sigmoid focal loss
    plain = EqualizedFocalLoss(2, gamma=2.0, alpha=0.25, scale_factor=4.0)(LOGITS, LABELS)
    assert plain.item() == pytest.approx(0.25 * math.log(2) * 0.25 + 0.75 * -math.log(1 - p1) * p1 ** 2, rel=1e-6)


def test_eqfl_by_hand():
    got = loss_with_ratio(quality=True)(LOGITS, LABELS, torch.tensor([0.8]))
    p1 = sig(1.0)
    bce_q = -(0.8 * math.log(0.5) + 0.2 * math.log(0.5))
    want = bce_q * abs(0.8 - 0.5) ** 2 * 1.0 + math.log(1 + math.e) * p1 ** 5 * 2.5
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_ignored_anchors_count_nothing():
    loss = loss_with_ratio(alpha=0.25)
    both = loss(torch.tensor([[0.0, 1.0], [3.0, -2.0]]), torch.tensor([1, -1]))
    assert both.item() == pytest.approx(loss(LOGITS, LABELS).item(), rel=1e-7)


def test_collect_grad_pairs_each_anchors_classes_with_its_targets():
    loss = EqualizedFocalLoss(2, levels=2)
    loss(torch.zeros(3, 2), torch.tensor([1, 0, 2]))  # level 0: 2 anchors (1 x 2 map), level 1: one
    loss.collect_grad(torch.tensor([[[[0.5]], [[-0.25]]]]))  # level 1 (the backward pass runs last level first)
    assert loss.pos_grad.tolist() == [0, 0]  # nothing until every level is in
    loss.collect_grad(torch.tensor([[[[-0.1, 0.2]], [[0.3, -0.4]]]]))  # level 0: [N, C, H=1, W=2]
    # anchors: (class grads) a0 (0.1, 0.3) label 1; a1 (0.2, 0.4) background; a2 (0.5, 0.25) label 2
    assert torch.allclose(loss.pos_grad, torch.tensor([0.1, 0.25]))
    assert torch.allclose(loss.neg_grad, torch.tensor([0.2 + 0.5, 0.3 + 0.4]))
    assert torch.allclose(loss.pos_neg, torch.tensor([0.1 / 0.7, 0.25 / 0.7]))


def efl_yolox_net(num_classes=3):
    with open(os.path.join(UP_FIXTURES, "det", "efl", "efl_yolox_small.yaml")) as f:
        cfg = yaml.safe_load(f)
    for entry in cfg["net"][2:]:
        entry["kwargs"]["num_classes"] = num_classes
    cfg["net"][3]["kwargs"]["cfg"]["cls_loss"]["kwargs"]["num_classes"] = num_classes
    return cfg["net"], cfg["hooks"][2]["kwargs"]


def step(model, hook):
    torch.manual_seed(1)
    batch = {"image": [torch.rand(3, 64, 64)],
             "target": [{"boxes": torch.tensor([[4.0, 6.0, 40.0, 44.0]]), "labels": torch.tensor([1])}]}
    losses = model.train()(batch)
    sum(losses.values()).backward()
    return losses


def test_up_efl_yolox_file_collects_through_the_hook_and_resumes_bitwise():
    net, hook_kwargs = efl_yolox_net()
    torch.manual_seed(0)
    model = build_model(net)
    efl = model.post_process.cls_loss
    assert (efl.levels, efl.scale_factor, efl.alpha, efl.quality) == (3, 4.0, 0.25, False)
    hook = GradientCollector(**hook_kwargs)
    hook.name = "gradient_collector"
    hook.before_train(types.SimpleNamespace(module=model))
    step(model, hook)
    assert efl.neg_grad.sum() > 0 and efl.pos_grad[0] > 0 and efl.pos_neg[1:].eq(0).all()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert {"post_process.cls_loss.pos_grad", "post_process.cls_loss.neg_grad",
            "post_process.cls_loss.pos_neg"} <= set(state)
    after = step(model, hook)  # the next step, from here
    resumed = build_model(net)
    resumed.load_state_dict(state)
    hook.remove()
    hook.before_train(types.SimpleNamespace(module=resumed))
    again = step(resumed, hook)
    hook.remove()
    for key in after:
        assert torch.equal(after[key], again[key]), key
    for name in ("pos_grad", "neg_grad", "pos_neg"):
        assert torch.equal(getattr(efl, name), getattr(resumed.post_process.cls_loss, name))


@pytest.mark.parametrize("key, value, message", [
    ("fpn_levels", 5, "5 but the net has 3 levels"),
    ("num_classes", 7, ""),
    ("reduction", "sum", ""),
    ("dynamic_normalizer", True, ""),
    ("focal_gamma", 0, "must be > 0"),
    ("focal_beta", 1.0, ""),
])
def test_efl_kwargs_refused_in_one_line(key, value, message):
    net, _ = efl_yolox_net()
    net[3]["kwargs"]["cfg"]["cls_loss"]["kwargs"][key] = value
    with pytest.raises(ConfigError) as err:
        check_up_net(net)
    text = str(err.value)
    assert text.startswith(f"net[3].kwargs.cfg.cls_loss.kwargs.{key}") and message in text and "\n" not in text
