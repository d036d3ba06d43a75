"""memory_checkpoint hook: candidates, exactness of checkpointed training, static / dynamic plans."""
import copy
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from up_trainer.errors import ConfigError
from up_trainer.hooks.base import HookList
from up_trainer.memckpt import candidates, planner, profiler
from up_trainer.registry import HOOKS, MODELS

LEVEL2 = {"backbone": {"patterns_mode": "level", "level": {"num": 2}}}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # The box is shared and loaded: idle OpenMP workers spinning for a core cost more than
    # they give on these tiny tensors, and make the process-time measurements noisy.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def resnet(arch="resnet18"):
    torch.manual_seed(0)
    return MODELS.build({"type": arch, "kwargs": {"num_classes": 10, "in_channels": 1, "small_input": True}})


class Block(nn.Module):
    def __init__(self, c, p=0.3):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.drop = nn.Dropout(p)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.drop(F.relu(self.bn1(self.conv1(x))))
        return F.relu(self.bn2(self.conv2(y)) + x)


class Shared(nn.Module):
    """A head applied to several feature maps with the same weights (share_weight_num)."""

    def __init__(self, c):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class DropNet(nn.Module):
    def __init__(self, c=8, inplace_first=False, mutating=False):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(1, c, 3, padding=1), nn.BatchNorm2d(c))
        blocks = [Block(c), Block(c), Block(c)]
        if inplace_first:  # after a conv: the conv saves its input, not its output
            blocks += [nn.Conv2d(c, c, 1), nn.Sequential(nn.ReLU(inplace=True), nn.Conv2d(c, c, 1))]
        if mutating:
            blocks.append(Mutating(c))
        self.backbone = nn.Sequential(*blocks)
        self.head = Shared(c)
        self.fc = nn.Sequential(nn.Dropout(0.2), nn.Linear(c, 10))

    def forward(self, batch):
        f = self.backbone(self.stem(batch["image"]))
        levels = [f, F.avg_pool2d(f, 2), F.avg_pool2d(f, 4)]
        pooled = sum(self.head(x).mean((2, 3)) for x in levels)
        logits = self.fc(pooled)
        return {"logits": logits, "loss": F.cross_entropy(logits, batch["label"])}


class Mutating(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1)

    def forward(self, x):
        return self.conv(x.mul_(0.5))  # in place on its input: must never be checkpointed


def batch(size, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"image": torch.randn(n, 1, size, size, generator=g), "label": torch.randint(0, 10, (n,), generator=g)}


def hook(patterns=LEVEL2, dc_cfg=None):
    kwargs = {"checkpoint_patterns": patterns}
    if dc_cfg is not None:
        kwargs["dc_cfg"] = dc_cfg
    h = HOOKS.build({"type": "memory_checkpoint", "kwargs": kwargs})
    HookList().add(h, name="memory_checkpoint")
    return h


def trainer(model):
    return types.SimpleNamespace(module=model, model=model, device=torch.device("cpu"))


def step(model, h, b, it, opt=None):
    """One iteration as the Trainer runs it; returns the loss."""
    tr = trainer(model)
    if h is not None:
        h.before_forward(tr, it, b)
    out = model(b)
    out["loss"].backward()
    if opt is not None:
        opt.step()
        opt.zero_grad()
    if h is not None:
        h.after_update(tr, it)
    return out["loss"].detach()


# -- candidates ----------------------------------------------------------------------------
def test_levels_on_torchvision_resnet():
    m = resnet()
    parse = candidates.parse_patterns
    found, skipped = candidates.find_candidates(m, parse({"backbone": {"patterns_mode": "level", "level": {"num": 1}}}))
    assert [c.name for c in found] == ["backbone.conv1", "backbone.bn1", "backbone.layer1", "backbone.layer2",
                                       "backbone.layer3", "backbone.layer4", "backbone.fc"]
    assert set(skipped) == {"backbone.relu", "backbone.maxpool", "backbone.avgpool"}
    found, _ = candidates.find_candidates(m, parse(LEVEL2))
    assert [c.name for c in found] == [f"backbone.layer{i}.{j}" for i in range(1, 5) for j in range(2)]
    assert all(type(c.module).__name__ == "BasicBlock" for c in found)
    found, _ = candidates.find_candidates(m, parse({"backbone": {"patterns_mode": "name",
                                                                 "name_list": ["layer3", "layer4.1"]}}))
    assert [c.name for c in found] == ["backbone.layer3", "backbone.layer4.1"]


def test_candidate_errors():
    m = resnet()
    with pytest.raises(ConfigError, match="backbone"):
        candidates.find_candidates(m, candidates.parse_patterns({"backbon": {"level": {"num": 1}}}))
    with pytest.raises(ConfigError, match="levels deep"):
        candidates.find_candidates(m, candidates.parse_patterns({"backbone": {"level": {"num": 9}}}))
    with pytest.raises(ConfigError, match="inside"):
        candidates.find_candidates(m, candidates.parse_patterns(
            {"backbone": {"patterns_mode": "name", "name_list": ["layer1", "layer1.0"]}}))
    with pytest.raises(ConfigError, match=r"hooks\[0\]\.kwargs\.dc_cfg\.strategy.*greedy"):
        HOOKS.build({"type": "memory_checkpoint", "kwargs": {"checkpoint_patterns": LEVEL2,
                     "dc_cfg": {"max_memory": 1, "strategy": "greedyy"}}}, path="hooks[0]")
    with pytest.raises(ConfigError, match="max_memory"):
        hook(dc_cfg={"warmup_iters": 3})
    with pytest.raises(ConfigError, match="level.num"):
        hook({"backbone": {"patterns_mode": "level", "level": {"num": 0}}})


def test_inplace_inputs_excluded_statically_and_by_dry_run():
    m = DropNet(inplace_first=True, mutating=True)
    h = hook({"backbone": {"patterns_mode": "level", "level": {"num": 1}}})
    h.before_train(trainer(m))
    assert "backbone.4" not in [c.name for c in h.ctrl.candidates]  # ReLU(inplace=True) first
    ref = copy.deepcopy(m)  # wrapped forwards follow the copy (EMA hooks deep-copy models)
    b = batch(8)
    torch.manual_seed(1)
    step(m, h, b, 1)
    assert "backbone.5" in h.excluded and "in place" in h.excluded["backbone.5"]
    assert h.ctrl.units == ["backbone.0", "backbone.1", "backbone.2", "backbone.3"]
    assert h.ctrl.checkpointed_calls == 4
    # the dry run left buffers and RNG as they were: same step as a model without the hook
    torch.manual_seed(1)
    step(ref, None, b, 1)
    for (k, a), (_, r) in zip(m.state_dict().items(), ref.state_dict().items()):
        assert torch.equal(a, r), k


# -- exactness -----------------------------------------------------------------------------
PATTERNS_DROPNET = {"backbone": {"patterns_mode": "level", "level": {"num": 1}},
                    "head": {"patterns_mode": "name", "name_list": [""], "share_weight_num": 3},
                    "stem": {"patterns_mode": "name", "name_list": [""]}}


@pytest.mark.parametrize("make,patterns", [(resnet, LEVEL2), (DropNet, PATTERNS_DROPNET)])
def test_gradients_equal_with_and_without_checkpointing(make, patterns):
    plain, ckpt = make(), make()
    h = hook(patterns)
    h.before_train(trainer(ckpt))
    b = batch(8, n=2)
    torch.manual_seed(1)
    step(plain, None, b, 1)
    torch.manual_seed(1)
    step(ckpt, h, b, 1)
    assert h.ctrl.recompute_calls > 0
    for (name, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        assert torch.equal(p.grad, q.grad), name
    if make is DropNet:
        assert {"head#0", "head#1", "head#2"} <= set(h.ctrl.units)


def test_training_run_ends_with_same_weights_and_buffers():
    """BatchNorm running stats are updated once per forward, not again on recomputation."""
    plain, ckpt = DropNet(), DropNet()
    h = hook(PATTERNS_DROPNET)
    h.before_train(trainer(ckpt))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (plain, ckpt)]
    torch.manual_seed(3)
    for it in range(1, 5):
        step(plain, None, batch(8 + 2 * it, seed=it), it, opts[0])
    torch.manual_seed(3)
    for it in range(1, 5):
        step(ckpt, h, batch(8 + 2 * it, seed=it), it, opts[1])
    h.after_train(trainer(ckpt))
    assert h.ctrl is None and "forward" not in ckpt.backbone[0].__dict__
    assert int(ckpt.stem[1].num_batches_tracked) == 4
    for (k, a), (_, r) in zip(plain.state_dict().items(), ckpt.state_dict().items()):
        assert torch.equal(a, r), k


def test_eval_is_not_checkpointed():
    m = resnet()
    h = hook()
    h.before_train(trainer(m))
    h.before_forward(trainer(m), 1, batch(8, n=2))
    m.eval()
    with torch.no_grad():
        m(batch(8, n=2))
    assert h.ctrl.checkpointed_calls == 0


# -- static and dynamic modes -----------------------------------------------------------------
def saved_bytes(model, b):
    out, nbytes = profiler.measure(model, model, b)
    out["loss"].backward()
    return nbytes


def test_static_mode_lowers_saved_activation_bytes():
    m = resnet()
    none = saved_bytes(m, batch(8, n=2))
    h = hook()
    h.before_train(trainer(m))
    h.before_forward(trainer(m), 1, batch(8, n=2))
    static = saved_bytes(m, batch(8, n=2))
    assert static * 2 < none


SIZES = [8, 16, 12, 20, 16, 8, 20, 12, 16, 20, 12, 8]  # variable input sizes, repeated


def run_dynamic(budget_bytes, strategy="greedy", warmup=3):
    m = DropNet()
    h = hook(PATTERNS_DROPNET, dc_cfg={"warmup_iters": warmup, "max_memory": budget_bytes / 2**30, "debug_freq": 4,
                     "strategy": strategy, "bucket": 4})
    h.before_train(trainer(m))
    measured = []
    for it, s in enumerate(SIZES, 1):
        step(m, h, batch(s, seed=it), it)
        measured.append((s, h.last_bytes, h.plan))
    return h, m, measured[warmup:]


def extremes():
    """Activation bytes per size without checkpointing and with every candidate checkpointed."""
    m = DropNet()
    none = {s: saved_bytes(m, batch(s)) for s in set(SIZES)}
    h = hook(PATTERNS_DROPNET)
    h.before_train(trainer(m))
    h.before_forward(trainer(m), 1, batch(8))
    full = {s: saved_bytes(m, batch(s)) for s in set(SIZES)}
    return none, full, h


def test_dynamic_mode_stays_under_budgets_and_recomputes_less_than_static():
    none, full, static = extremes()
    lo, hi = max(full.values()), max(none.values())
    assert lo < hi
    static.ctrl.recompute_calls = 0
    static.ctrl.recompute_seconds = 0.0
    m = static.ctrl.root
    for it, s in enumerate(SIZES[3:], 1):
        step(m, static, batch(s, seed=it), it)
    for frac in (0.3, 0.7):
        budget = lo + frac * (hi - lo)
        for strategy in ("greedy", "memory_time"):
            h, _, measured = run_dynamic(budget, strategy)
            for s, nbytes, plan in measured:
                assert nbytes <= budget, (strategy, frac, s, nbytes, budget)
                if none[s] <= budget:  # budget not at risk: nothing checkpointed
                    assert not plan.units
            assert any(plan.units for _, _, plan in measured)
            assert h.ctrl.recompute_calls < static.ctrl.recompute_calls
            assert h.ctrl.recompute_seconds < static.ctrl.recompute_seconds


def test_plan_cache_hits_on_repeated_sizes():
    none, full, _ = extremes()
    h, _, measured = run_dynamic((max(full.values()) + max(none.values())) / 2)
    distinct = {s for s, _, _ in measured}
    assert h.planner.misses == len(distinct)
    assert h.planner.hits == len(measured) - len(distinct)


def test_resume_keeps_profile(tmp_path):
    none, full, _ = extremes()
    budget = (max(full.values()) + max(none.values())) / 2
    h, m, _ = run_dynamic(budget)
    torch.save({"hooks": {"memory_checkpoint": h.state_dict()}}, tmp_path / "c.pth")
    state = torch.load(tmp_path / "c.pth", weights_only=True)["hooks"]["memory_checkpoint"]
    h2 = hook(PATTERNS_DROPNET, dc_cfg={"warmup_iters": 3, "max_memory": budget / 2**30, "bucket": 4})
    h2.load_state_dict(state)
    m2 = DropNet()
    h2.before_train(trainer(m2))
    assert h2.planner is not None and not h2.profiling  # no re-profiling after resume
    step(m2, h2, batch(20), 1)
    assert h2.plan.units == h.planner.cache[profiler.size_key(batch(20)["image"], 4)[0]].units
    assert h2.last_bytes <= budget


# -- planner strategies on a synthetic profile ----------------------------------------------------
def test_greedy_takes_fewest_modules_memory_time_least_time():
    # A saves 10 units of memory in 10 s; B and C save 6 each in 1 s. Need: 10.
    samples = [{"n": n, "total": 30 * n, "overhead": None,
                "groups": {"<outside>|": 8 * n, "A|": 10 * n, "B|": 6 * n, "C|": 6 * n},
                "times": {"A": 10.0 * n, "B": 1.0 * n, "C": 1.0 * n}} for n in (1, 2, 3)]
    prof = profiler.FittedProfile(samples)
    budget_gb = 20 * 2 / planner.GB  # at n=2: 60 bytes without checkpointing, budget 40
    greedy = planner.Planner(prof, ["A", "B", "C"], budget_gb * planner.GB / planner.GB, "greedy").plan(2)
    knap = planner.Planner(prof, ["A", "B", "C"], budget_gb, "memory_time").plan(2)
    assert greedy.units == {"A"} and greedy.fits
    assert knap.units == {"B", "C"} and knap.fits and knap.seconds < greedy.seconds
    assert planner.Planner(prof, ["A", "B", "C"], 100 / planner.GB).plan(2).units == frozenset()


def test_cuda_peak_model_checkpoints_although_one_unit_alone_lowers_nothing():
    """On CUDA the prediction is overhead + activations + the recomputation transient of the
    largest checkpointed unit; one unit alone then saves exactly its transient. The search must
    rank units by the activations they save, or it stops before the first (seen on an H100:
    'checkpoint 0 unit(s) ... OVER BUDGET even so')."""
    samples = [{"n": n, "total": 38 * n, "overhead": 100.0 * n,
                "groups": {"<outside>|": 8 * n, "A|": 10 * n, "B|": 10 * n, "C|": 10 * n},
                "times": {"A": 3.0 * n, "B": 1.0 * n, "C": 2.0 * n}} for n in (1, 2, 3)]
    prof = profiler.FittedProfile(samples)
    # at n=2: 200 overhead + 76 activations = 276 unchecked; one unit: 276; two: 256; three: 236
    for strategy in ("greedy", "memory_time"):
        tight = planner.Planner(prof, ["A", "B", "C"], 250 / planner.GB, strategy, cuda=True).plan(2)
        assert tight.units == {"A", "B", "C"} and tight.fits and tight.predicted == 236, (strategy, tight)
        loose = planner.Planner(prof, ["A", "B", "C"], 260 / planner.GB, strategy, cuda=True).plan(2)
        assert loose.units == {"B", "C"} and loose.fits and loose.predicted == 256, (strategy, loose)
    over = planner.Planner(prof, ["A", "B", "C"], 200 / planner.GB, "greedy", cuda=True).plan(2)
    assert not over.fits and over.units == {"A", "B", "C"}  # the most it can do, and it says so


# -- a detector (tasks/det): backbone blocks, FPN convs, a head shared over 5 FPN levels -----------
def test_detector_gradients_equal_and_fewer_bytes():
    def det():
        torch.manual_seed(0)
        return MODELS.build({"type": "retinanet", "kwargs": {"num_classes": 3, "backbone": "resnet18",
                                                            "min_size": 64, "max_size": 64, "fpn_channels": 32}})
    g = torch.Generator().manual_seed(0)
    b = {"image": [torch.rand(3, 64, 64, generator=g), torch.rand(3, 48, 64, generator=g)],
         "target": [{"boxes": torch.tensor([[4., 4., 30., 30.]]), "labels": torch.tensor([1])},
                    {"boxes": torch.tensor([[10., 8., 40., 30.]]), "labels": torch.tensor([2])}]}
    patterns = {"backbone": {"patterns_mode": "level", "level": {"num": 2}},
                "neck": {"patterns_mode": "level", "level": {"num": 2}},
                "head": {"patterns_mode": "name", "name_list": ["classification_head.conv", "regression_head.conv"],
                         "share_weight_num": 5}}
    plain, ckpt = det(), det()
    out, none = profiler.measure(plain, plain, b)
    sum(v for k, v in out.items() if "loss" in k).backward()
    h = hook(patterns)
    h.before_train(trainer(ckpt))
    h.before_forward(trainer(ckpt), 1, b)
    out, static = profiler.measure(ckpt, ckpt, b)
    sum(v for k, v in out.items() if "loss" in k).backward()
    assert {f"head.regression_head.conv#{i}" for i in range(5)} <= set(h.ctrl.units)
    assert h.ctrl.recompute_calls == len(h.ctrl.units)  # each head call recomputed once
    assert static < 0.7 * none
    for (name, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        assert (p.grad is None) == (q.grad is None) and (p.grad is None or torch.equal(p.grad, q.grad)), name
