"""precise_bn: the evaluated BatchNorm statistics become the plain average over a few training
batches computed with the evaluated weights; the weights, the training stream and a resumed run
are exactly those of a run without it; with EMA the estimate lands in the average."""
import pytest
import torch

from optim_helpers import digits_cfg, resolved, train_in_process
from up_trainer.engine.builder import build_trainer, restore
from up_trainer.errors import ConfigError
from up_trainer.hooks.precise_bn import PreciseBNHook, batch_norms

EMA = {"type": "ema", "kwargs": {"ema_type": "exp", "decay": 0.9, "warmup": 5}}
PBN = {"type": "precise_bn", "kwargs": {"num_batches": 3}}


def cnn_cfg(hooks, max_epoch=2):
    return digits_cfg(net="test_cnn", train_subset=160, test_subset=64, max_epoch=max_epoch,
                      hooks=hooks, saver={"save_dir": "checkpoints"})


def bn_keys(state):
    return {k for k in state if k.endswith(("running_mean", "running_var"))}


def test_weights_and_stream_are_those_of_a_run_without_it(tmp_path):
    plain = train_in_process(cnn_cfg([EMA]), tmp_path / "plain")
    precise = train_in_process(cnn_cfg([EMA, PBN]), tmp_path / "precise")
    a, b = plain.module.state_dict(), precise.module.state_dict()
    for k in a:  # running statistics never enter a training forward: parameters are bitwise equal
        if k not in bn_keys(a):
            assert torch.equal(a[k], b[k]), k
    ema_a, ema_b = plain.ema.model, precise.ema.model
    for k in ema_a:
        if k not in bn_keys(ema_a):
            assert torch.equal(ema_a[k], ema_b[k]), k
    assert not torch.equal(ema_a["backbone.1.running_mean"], ema_b["backbone.1.running_mean"])
    assert plain.state.iter == precise.state.iter


def test_statistics_are_the_plain_average_of_the_evaluated_weights(tmp_path):
    trainer = build_trainer(resolved(cnn_cfg([PBN], max_epoch=1)), work_dir=str(tmp_path), device="cpu")
    hook = trainer.hooks.get("precise_bn")
    bn = trainer.module.backbone[1]
    tracked, momentum = bn.num_batches_tracked.clone(), bn.momentum
    rng = torch.get_rng_state()
    hook.before_eval(trainer)
    assert torch.equal(torch.get_rng_state(), rng)  # the global stream is untouched
    assert torch.equal(bn.num_batches_tracked, tracked) and bn.momentum == momentum
    conv = trainer.module.backbone[0]
    with torch.no_grad():
        outs = [conv(b["image"]) for b in hook._batches(trainer)]
    assert len(outs) == 3
    mean = torch.stack([o.mean((0, 2, 3)) for o in outs]).mean(0)
    var = torch.stack([o.var((0, 2, 3), unbiased=True) for o in outs]).mean(0)
    torch.testing.assert_close(bn.running_mean, mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bn.running_var, var, rtol=1e-5, atol=1e-6)
    assert trainer.module.training  # modes restored


def test_with_ema_the_estimate_is_in_the_average_and_the_raw_weights_are_restored(tmp_path):
    trainer = build_trainer(resolved(cnn_cfg([EMA, PBN], max_epoch=1)), work_dir=str(tmp_path), device="cpu")
    trainer.hooks.call("before_train", trainer)  # ema starts its average
    raw = {k: v.clone() for k, v in trainer.module.state_dict().items()}
    try:
        trainer.evaluate()
    finally:
        trainer.hooks.call("after_train", trainer)  # auto_checkpoint hands the signal handlers back
    for k, v in trainer.module.state_dict().items():
        assert torch.equal(v, raw[k]), k
    bn = trainer.module.backbone[1]
    assert not torch.equal(trainer.ema.model["backbone.1.running_mean"], bn.running_mean)
    assert not torch.equal(trainer.ema.model["backbone.1.running_var"], torch.ones_like(bn.running_var))


def test_resume_is_bitwise_equal_to_the_straight_run(tmp_path):
    straight = train_in_process(cnn_cfg([EMA, PBN], max_epoch=3), tmp_path / "straight")
    train_in_process(cnn_cfg([EMA, PBN], max_epoch=2), tmp_path / "half")
    resumed = build_trainer(resolved(cnn_cfg([EMA, PBN], max_epoch=3)), work_dir=str(tmp_path / "resumed"),
                            device="cpu")
    restore(resumed, str(tmp_path / "half" / "checkpoints" / "ckpt_e2.pth"), str(tmp_path / "resumed"))
    resumed.train()
    for k, v in straight.module.state_dict().items():
        assert torch.equal(v, resumed.module.state_dict()[k]), k
    for k, v in straight.ema.model.items():
        assert torch.equal(v, resumed.ema.model[k]), k
    assert straight.state.metrics == resumed.state.metrics


def test_a_model_without_batchnorm_is_left_alone(tmp_path):
    trainer = train_in_process(digits_cfg(hooks=[PBN], max_epoch=1), tmp_path)
    assert batch_norms(trainer.module) == {}


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "3"])
def test_bad_num_batches(value):
    with pytest.raises(ConfigError, match="num_batches"):
        PreciseBNHook(num_batches=value)
