"""grad_clipper: numerics against torch.nn.utils.clip_grad_norm_, hand-computed thresholds of
the average / moving_average modes over a sequence of norms, update-only clipping under
accumulation, fp16 unscaling, state, config errors and the trainer.clip_grad shortcut."""
import math

import pytest
import torch
from torch import nn

from optim_helpers import digits_cfg, fake_trainer, resolved
from up_trainer.engine.optim import Optimization
from up_trainer.engine.schedule import Schedule
from up_trainer.errors import ConfigError
from up_trainer.hooks.grad_clipper import GradClipper
from up_trainer.registry import HOOKS


def params_with_norm(norm, seed=0):
    """Two parameters whose gradients have total L2 norm ``norm``."""
    g = torch.Generator().manual_seed(seed)
    ps = [nn.Parameter(torch.zeros(3, 4)), nn.Parameter(torch.zeros(5))]
    grads = [torch.randn(p.shape, generator=g, dtype=torch.float64).float() for p in ps]
    total = torch.sqrt(sum((x.double() ** 2).sum() for x in grads))
    for p, x in zip(ps, grads):
        p.grad = (x.double() * (norm / total)).float()
    return ps


def norm_of(ps):
    return float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in ps)))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_pre_defined_matches_torch(norm_type):
    hook = GradClipper(mode="pre_defined", max_norm=0.7, norm_type=norm_type)
    for norm in (0.3, 5.0):
        ours, ref = params_with_norm(norm, seed=1), params_with_norm(norm, seed=1)
        total, clipped = hook.clip(ours)
        ref_total = torch.nn.utils.clip_grad_norm_(ref, 0.7, norm_type=norm_type)
        assert total == float(ref_total)
        for a, b in zip(ours, ref):
            assert torch.equal(a.grad, b.grad)
        assert clipped == (float(ref_total) > 0.7)


def run_sequence(hook, norms):
    thresholds, post = [], []
    for i, n in enumerate(norms):
        thresholds.append(hook.threshold())
        ps = params_with_norm(n, seed=i)
        total, clipped = hook.clip(ps)
        assert total == pytest.approx(n, rel=1e-6)
        post.append(norm_of(ps))
    return thresholds, post


NORMS = [1.0, 2.0, 10.0, 3.0, 100.0]


def test_average_mode_thresholds_exclude_the_current_norm():
    thresholds, post = run_sequence(GradClipper(mode="average", tolerance=2.0), NORMS)
    # no history -> no clip; then 2 x mean of the *earlier* pre-clip norms
    want = [None, 2 * 1.0, 2 * 1.5, 2 * 13 / 3, 2 * 16 / 4]
    assert thresholds[0] is None
    assert thresholds[1:] == pytest.approx(want[1:])
    expected_post = [1.0, 2.0, 3.0, 3.0, 8.0]  # 10 -> 3 and 100 -> 8; 2.0 is not above 2.0
    assert post == pytest.approx(expected_post, rel=1e-5)


def test_moving_average_mode_and_max_norm_before_history():
    hook = GradClipper(mode="moving_average", tolerance=1.5, momentum=0.5, max_norm=0.5)
    thresholds, post = run_sequence(hook, NORMS)
    ema = [1.0]  # pre-clip norms enter the average after their own update
    for n in NORMS[1:]:
        ema.append(0.5 * ema[-1] + 0.5 * n)
    want = [0.5] + [1.5 * e for e in ema[:-1]]  # first update: max_norm (no history yet)
    assert thresholds == pytest.approx(want)
    assert post == pytest.approx([min(n, t) for n, t in zip(NORMS, want)], rel=1e-5)
    # the running statistic survives a state_dict round trip exactly
    clone = GradClipper(mode="moving_average", tolerance=1.5, momentum=0.5)
    clone.load_state_dict(hook.state_dict())
    assert clone.threshold() == hook.threshold() == pytest.approx(1.5 * ema[-1], rel=1e-6)


def test_non_finite_norm_is_neither_clipped_nor_recorded():
    hook = GradClipper(mode="average", tolerance=1.0)
    hook.clip(params_with_norm(2.0))
    ps = params_with_norm(1.0)
    ps[0].grad[0, 0] = float("inf")
    total, clipped = hook.clip(ps)
    assert math.isinf(total) and not clipped
    assert hook.state_dict() == {"count": 1, "total": 2.0, "moving": None}


def make_trainer(accumulate=1, runtime=None, epoch_len=4):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    tcfg = {"optimizer": {"type": "SGD", "kwargs": {"lr": 0.1}}, "accumulate": accumulate, "max_epoch": 1}
    optim = Optimization(model, tcfg, runtime or {}, torch.device("cpu"), Schedule(tcfg, epoch_len))
    return fake_trainer(model, optim, epoch_len), model


def test_clips_only_at_update_steps_under_accumulation():
    trainer, model = make_trainer(accumulate=2, epoch_len=3)
    hook = GradClipper(mode="pre_defined", max_norm=1e-3)
    x = torch.ones(8, 4)
    for epoch_iter in range(3):
        trainer.state.epoch_iter = epoch_iter
        trainer.optim.backward(model(x).pow(2).sum(), trainer.optim.group_size(epoch_iter, 3))
        before = model.weight.grad.clone()
        update = epoch_iter in (1, 2)  # groups {0, 1} and the short last {2}
        assert trainer.optim.is_update(epoch_iter, 3) == update
        if update:  # what the trainer does: before_step only when this micro-batch steps
            trainer.scalars.new_step()
            hook.before_step(trainer, epoch_iter + 1)
            assert trainer.scalars.get("grad_norm") is not None and not torch.equal(before, model.weight.grad)
            assert norm_of(list(model.parameters())) == pytest.approx(1e-3, rel=1e-3)
            assert trainer.scalars.get("grad_clipped")
            trainer.optim.step()
    assert hook.count == 2


def test_fp16_gradients_are_unscaled_before_measuring():
    trainer, model = make_trainer(runtime={"fp16": True, "amp": {"force": True}})
    trainer.optim.scaler._init_scale = 256.0  # the default 65536 overflows fp16 on this toy loss
    assert trainer.optim.scaler.get_scale() == 256.0
    ref = nn.Linear(4, 2)
    ref.load_state_dict(model.state_dict())
    x = torch.randn(8, 4)
    ref(x).pow(2).sum().backward()
    with trainer.optim.autocast():
        loss = model(x).float().pow(2).sum()
    trainer.optim.backward(loss)
    hook = GradClipper(mode="pre_defined", max_norm=1e9)
    hook.before_step(trainer, 1)
    norm = trainer.scalars.get("grad_norm")
    assert norm == pytest.approx(norm_of(list(ref.parameters())), rel=1e-2)
    assert not trainer.scalars.get("grad_clipped")
    trainer.optim.unscale_()  # idempotent: a second call must not unscale again
    assert norm_of(list(model.parameters())) == pytest.approx(norm, rel=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({"mode": "pre_defined"}, r"hooks\[0\]\.kwargs\.max_norm: mode pre_defined needs max_norm"),
    ({"mode": "moving"}, r"kwargs\.mode: unknown mode 'moving'.*moving_average"),
    ({"mode": "average", "tolerance": 0}, r"kwargs\.tolerance: must be > 0"),
    ({"mode": "moving_average", "momentum": 1.0}, r"kwargs\.momentum: must be in \[0, 1\)"),
    ({"mode": "average", "max_norm": "10"}, r"kwargs\.max_norm: expected"),
])
def test_kwargs_are_checked(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        HOOKS.build({"type": "grad_clipper", "kwargs": kwargs}, "hooks[0]")


def test_clip_grad_shortcut_becomes_a_hook():
    cfg = resolved(digits_cfg(trainer={"max_epoch": 1, "clip_grad": {"max_norm": 5, "norm_type": 2}}))
    entries = [h for h in cfg["hooks"] if h["type"] == "grad_clipper"]
    assert entries == [{"type": "grad_clipper", "kwargs": {"max_norm": 5, "norm_type": 2}}]
    assert cfg["trainer"]["clip_grad"] is None  # consumed: the hook is the one implementation
    opts = ["trainer.clip_grad.mode=average", "trainer.clip_grad.tolerance=3"]
    cfg = resolved(digits_cfg(trainer={"max_epoch": 1, "clip_grad": {"max_norm": 5}}), opts)
    assert [h["kwargs"] for h in cfg["hooks"] if h["type"] == "grad_clipper"] == [
        {"max_norm": 5, "mode": "average", "tolerance": 3}]
    with pytest.raises(ConfigError, match=r"trainer\.clip_grad\.max_nrm: unknown key.*max_norm"):
        resolved(digits_cfg(trainer={"max_epoch": 1, "clip_grad": {"max_nrm": 5}}))
    with pytest.raises(ConfigError, match="configured twice"):
        resolved(digits_cfg(trainer={"max_epoch": 1, "clip_grad": {"max_norm": 5}},
                            hooks=[{"type": "grad_clipper", "kwargs": {"max_norm": 1}}]))


def test_training_logs_grad_norm_every_update(tmp_path):
    from up_trainer.engine.builder import build_trainer
    from up_trainer.hooks.base import Hook

    cfg = digits_cfg(train_subset=40, batch_size=8, max_epoch=1,
                     trainer={"max_epoch": 1, "accumulate": 2, "clip_grad": {"mode": "average", "tolerance": 1.0}})
    seen = []

    class Probe(Hook):
        def after_update(self, trainer, iteration):
            if trainer.did_update:
                seen.append((trainer.scalars.get("grad_norm"), trainer.scalars.get("grad_clipped")))

    trainer = build_trainer(resolved(cfg), work_dir=str(tmp_path), device="cpu")
    trainer.hooks.add(Probe(), priority=99)
    trainer.train()
    assert len(seen) == 3  # 5 batches, accumulate 2 -> 3 updates
    assert all(n > 0 for n, _ in seen) and any(c for _, c in seen)


def test_grad_norm_is_logged_without_a_clipper_and_can_be_turned_off(tmp_path):
    """The logger measures the total norm at every step by itself; grad_norm: false opts out."""
    import csv

    from up_trainer.engine.builder import build_trainer
    from up_trainer.hooks.base import Hook

    measured = []

    class Reference(Hook):  # runs after the logger's before_step, before the optimizer step
        def before_step(self, trainer, iteration):
            grads = [p.grad for p in trainer.module.parameters() if p.grad is not None]
            measured.append((trainer.scalars.get("grad_norm"), float(torch.nn.utils.get_total_norm(grads))))

    for on in (True, False):
        measured.clear()
        run_dir = tmp_path / str(on)
        logger = {"type": "train_val_logger", "kwargs": {"freq": 1, "summary_writer": "none", "plot": False,
                                                         "grad_norm": on}}
        cfg = digits_cfg(train_subset=24, batch_size=8, max_epoch=1, hooks=[logger])
        trainer = build_trainer(resolved(cfg), work_dir=str(run_dir), device="cpu")
        trainer.hooks.add(Reference(), priority="LOWEST")
        trainer.train()
        with open(run_dir / "metrics.csv", newline="") as f:
            logged = [r.get("grad_norm") or "" for r in csv.DictReader(f) if r["phase"] == "train"]
        assert len(measured) == len(logged) == 3
        if on:
            assert all(isinstance(n, torch.Tensor) and float(n) == pytest.approx(ref, rel=1e-5) for n, ref in measured)
            assert [float(v) for v in logged] == pytest.approx([ref for _, ref in measured], rel=1e-4)
        else:
            assert all(n is None for n, _ in measured) and logged == ["", "", ""]
