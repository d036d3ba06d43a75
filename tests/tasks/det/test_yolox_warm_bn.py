"""YOLOX's BatchNorms (momentum 0.03) average their first batches plainly: running statistics
carry no share of the initial mean 0 / variance 1, so a model evaluated after a few dozen
updates (one epoch of a small data set) sees the statistics of its own activations."""
import torch
from torch import nn

from up_trainer.tasks.det.yolox import build_yolox
from up_trainer.tasks.det.yolox.layers import BN_MOMENTUM, WarmStartBatchNorm2d


def _batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 3, 6, 6, generator=g) * 50 + 1000 for _ in range(n)]


def test_plain_average_while_it_outweighs_the_momentum_then_exponential():
    warm = WarmStartBatchNorm2d(3, eps=1e-3, momentum=BN_MOMENTUM)
    cumulative = nn.BatchNorm2d(3, eps=1e-3, momentum=None)  # torch's plain average
    batches = _batches(40)
    for x in batches[:33]:  # 1 / 33 >= 0.03: still the plain average
        warm(x), cumulative(x)
    torch.testing.assert_close(warm.running_mean, cumulative.running_mean)
    torch.testing.assert_close(warm.running_var, cumulative.running_var)
    mean = warm.running_mean.clone()
    for x in batches[33:]:  # from here on YOLOX's exponential average
        mean = (1 - BN_MOMENTUM) * mean + BN_MOMENTUM * x.mean((0, 2, 3))
        warm(x)
    torch.testing.assert_close(warm.running_mean, mean)
    assert warm.momentum == BN_MOMENTUM and int(warm.num_batches_tracked) == 40


def test_a_loaded_count_resumes_the_exponential_average():
    warm = WarmStartBatchNorm2d(3, eps=1e-3, momentum=BN_MOMENTUM)
    warm(_batches(1)[0])  # counted 1 here, then a checkpoint of a long run is loaded
    state = dict(warm.state_dict(), num_batches_tracked=torch.tensor(500))
    warm.load_state_dict(state)
    before, x = warm.running_mean.clone(), _batches(1, seed=1)[0]
    warm(x)
    torch.testing.assert_close(warm.running_mean, (1 - BN_MOMENTUM) * before + BN_MOMENTUM * x.mean((0, 2, 3)))


def test_yolox_stem_evaluated_after_few_updates_matches_its_training_mode_output():
    torch.manual_seed(0)
    model = build_yolox(num_classes=2, size="nano", width=0.125)
    assert all(type(m) is WarmStartBatchNorm2d for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    x = torch.rand(4, 3, 64, 64) * model.pixel_scale  # YOLOX's 0-255 pixels: a stem mean far from 0
    stem = model.backbone.stem
    stem.train()
    with torch.no_grad():
        for _ in range(5):  # a plain momentum-0.03 BatchNorm would still hold 86 % of its init
            train_out = stem(x)
        stem.eval()
        eval_out = stem(x)
    # same batch every time: the running statistics are its own (variance: the unbiased estimate)
    assert (train_out - eval_out).abs().max() < 1e-3 * train_out.abs().max()
