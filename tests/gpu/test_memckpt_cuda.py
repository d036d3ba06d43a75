"""memory_checkpoint on CUDA, judged by torch.cuda.max_memory_allocated (about 40 s on an H100).

ResNet-50 on digits upsampled to 128 px, batch 32: activations (about 1 GiB) outweigh weights,
gradients and momentum (about 0.3 GiB), so checkpointing the bottleneck blocks shows.
"""
import pytest

from gpu_helpers import cuda_cfg, probe
from test_train_e2e import train

pytestmark = pytest.mark.cuda

GIB = 2 ** 30
UPSAMPLED = [{"type": "Resize", "kwargs": {"size": [128, 128], "antialias": False}}]
BLOCKS = {"backbone": {"patterns_mode": "level", "level": {"num": 2}}}  # the Bottleneck blocks
WARMUP = 3


def run(tmp_path, run_up, name, max_epoch, hook_kwargs=None):
    hooks = [{"type": "train_val_logger", "kwargs": {"freq": 1}}]
    hooks += [{"type": "memory_checkpoint", "kwargs": hook_kwargs}] if hook_kwargs else []
    cfg = cuda_cfg(tmp_path / f"{name}.json", hooks=hooks,
                   dataset={"train": {"type": "digits", "kwargs": {"split": "train", "subset": 96,
                                                                    "transforms": UPSAMPLED}},
                            "test": None, "batch_size": 32},
                   trainer={"max_epoch": max_epoch, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.01, "momentum": 0.9}}},
                   net={"type": "resnet50", "kwargs": {"num_classes": 10, "in_channels": 1}},
                   default_hooks={"best": None})
    cfg["hooks"][-1]["kwargs"]["peak_after_iter"] = WARMUP if hook_kwargs and "dc_cfg" in hook_kwargs else 0
    run_dir, res = train(run_up, tmp_path, name, cfg)
    return probe(tmp_path / f"{name}.json")["max_memory_allocated"], res, run_dir


def test_static_and_dynamic_stay_under_their_budgets(tmp_path, run_up):
    plain, res, run_dir = run(tmp_path, run_up, "plain", 1)
    # the logger's mem column is the same CUDA statistic (MiB)
    logged = [float(w[:-2]) for line in res.stdout.splitlines() if " mem " in line
              for w in line.split() if w.endswith("MB")]
    assert logged and 0.5 * plain / 2 ** 20 <= max(logged) <= plain / 2 ** 20 + 1, (logged, plain)

    static, res, _ = run(tmp_path, run_up, "static", 1, {"checkpoint_patterns": BLOCKS})
    assert "memory_checkpoint: static mode" in res.stdout
    assert static < 0.75 * plain, (static / GIB, plain / GIB)

    budget = (plain + static) / 2 / GIB  # between the two: dynamic must checkpoint some blocks, not all
    dc = {"warmup_iters": WARMUP, "max_memory": round(budget, 3), "debug_freq": 1, "strategy": "greedy"}
    dynamic, res, _ = run(tmp_path, run_up, "dynamic", 3, {"checkpoint_patterns": BLOCKS, "dc_cfg": dc})
    assert "memory_checkpoint: dynamic mode" in res.stdout and "cuda peak" in res.stdout
    assert dynamic <= dc["max_memory"] * GIB, (dynamic / GIB, dc["max_memory"])
    assert dynamic < plain, (dynamic / GIB, plain / GIB)
