"""reload: rebuilds from the config every `group` epochs (appended meta lines are used, the old
dataset is freed); mini_epoch splits passes deterministically and resumes exactly."""
import weakref

import numpy as np
import pytest
import torch

from conftest import tiny_cfg, write_cfg
from up_trainer.hooks.base import Hook
from up_trainer.hooks.reload import mini_epoch_indices
from up_trainer.registry import HOOKS

import ctrl_plugin  # noqa: F401  (registers test_fault)

seen = {}  # epoch -> sample indices trained on, in order
lengths = {}  # epoch -> (epoch_len, len(train_set))
refs = {}  # epoch -> weakref to the dataset object used


@HOOKS.register("test_data_probe")
class DataProbe(Hook):
    """Test only: what each epoch trains on; appends `append` meta lines after epoch 1."""

    priority = "LOWEST"

    def __init__(self, meta_file: str = "", append: list = ()):
        super().__init__()
        self.meta_file, self.append = meta_file, list(append)

    def before_epoch(self, trainer, epoch):
        lengths[epoch] = (trainer.state.epoch_len, len(trainer.loaders.train_set))
        refs[epoch] = weakref.ref(trainer.loaders.train_set)

    def before_forward(self, trainer, iteration, batch):
        seen.setdefault(trainer.state.epoch, []).extend(batch["index"].tolist())

    def after_epoch(self, trainer, epoch):
        if epoch == 1 and self.append:  # data arriving while the job runs
            with open(self.meta_file, "a") as f:
                f.write("\n".join(self.append) + "\n")


def clear():
    seen.clear(), lengths.clear(), refs.clear()


def base_cfg(max_epoch, hooks, train=None):
    cfg = tiny_cfg(trainer={"max_epoch": max_epoch})
    cfg["runtime"]["num_threads"] = 1
    cfg["dataset"]["train"]["kwargs"]["subset"] = 48
    if train is not None:
        cfg["dataset"]["train"] = train
    cfg["hooks"] = list(hooks)
    cfg["default_hooks"] = {"logger": {"type": "train_val_logger", "kwargs": {"summary_writer": "none", "plot": False}},
                            "best": None}
    return cfg


def train(run_up, tmp_path, name, cfg, *extra, code=0, work=None):
    res = run_up(["train", "--config", write_cfg(tmp_path / f"{name}.yaml", cfg),
                  "--work-dir", work or tmp_path / name, *extra])
    assert res.exit_code == code, (res.stdout[-3000:], res.stderr, res.exception)
    return res


def test_mini_epoch_indices_partition_every_pass():
    n, m = 50, 3
    passes = [[mini_epoch_indices(n, e, m, seed=5) for e in range(p * m + 1, p * m + m + 1)] for p in range(2)]
    for slices in passes:
        flat = [i for s in slices for i in s]
        assert sorted(flat) == list(range(n))  # each sample exactly once per pass
        assert [len(s) for s in slices] == [16, 17, 17]
    assert passes[0] != passes[1]  # every pass shuffles with its own seed
    assert mini_epoch_indices(n, 4, m, seed=5) == passes[1][0]  # a pure function: resumable
    assert mini_epoch_indices(n, 1, m, seed=6) != passes[0][0]


def write_images(tmp_path, count):
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    img_dir = tmp_path / "images"
    img_dir.mkdir(exist_ok=True)
    lines = []
    for i in range(count):
        Image.fromarray((digits.images[i] * 16).clip(0, 255).astype(np.uint8), "L").save(img_dir / f"{i}.png")
        lines.append(f"{i}.png {digits.target[i]}")
    return str(img_dir), lines


def test_reload_every_group_epochs_reads_appended_lines_and_frees_the_old_set(tmp_path, run_up):
    clear()
    img_dir, lines = write_images(tmp_path, 48)
    meta = tmp_path / "train.txt"
    meta.write_text("\n".join(lines[:32]) + "\n")
    train_entry = {"type": "cls", "kwargs": {"meta_file": str(meta), "image_dir": img_dir, "color_mode": "L",
                                              "num_classes": 10}}
    hooks = [{"type": "reload", "kwargs": {"group": 2}},
             {"type": "test_data_probe", "kwargs": {"meta_file": str(meta), "append": lines[32:]}}]
    res = train(run_up, tmp_path, "grow", base_cfg(3, hooks, train_entry))
    # 16 lines appended after epoch 1; group 2 rebuilds at the start of epoch 3 only.
    assert lengths == {1: (2, 32), 2: (2, 32), 3: (3, 48)}
    assert refs[1]() is None  # the first dataset object was released
    assert sorted(seen[3]) == list(range(48)) and sorted(seen[2]) == list(range(32))
    assert "reload: epoch 3 trains on 48 samples (3 iterations) (dataset rebuilt)" in res.stdout


def test_mini_epochs_split_passes_and_resume_bitwise(tmp_path, run_up):
    clear()
    hooks = [{"type": "reload", "kwargs": {"mini_epoch": 2}}, {"type": "test_data_probe"}]
    train(run_up, tmp_path, "straight", base_cfg(4, hooks))
    straight = {e: list(v) for e, v in seen.items()}
    assert {e: n for e, (n, _) in lengths.items()} == {1: 2, 2: 2, 3: 2, 4: 2}  # 24 samples, batch 16
    for first, second in ((1, 2), (3, 4)):  # one pass = two mini-epochs, each sample once
        assert sorted(straight[first] + straight[second]) == list(range(48))
    assert sorted(straight[1]) != sorted(straight[3])  # the second pass is split differently

    # Crash mid mini-epoch 3 (an exception snapshot at iteration 5), resume from the snapshot.
    clear()
    crash = base_cfg(4, hooks + [{"type": "test_fault", "kwargs": {"raise_at": 6}}])
    train(run_up, tmp_path, "crash", crash, code=1)
    snap = tmp_path / "crash" / "checkpoints" / "ckpt_e3-i5.pth"
    assert snap.exists()
    clear()
    train(run_up, tmp_path, "resumed", base_cfg(4, hooks), "--resume", snap, work=tmp_path / "crash")
    assert seen[3] == straight[3][16:] and seen[4] == straight[4]  # the rest of epoch 3, then epoch 4
    a = torch.load(tmp_path / "straight" / "checkpoints" / "ckpt_e4.pth", weights_only=True)
    b = torch.load(tmp_path / "crash" / "checkpoints" / "ckpt_e4.pth", weights_only=True)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["iter"] == b["iter"] == 8


def test_bad_kwargs(tmp_path, run_up):
    cfg = base_cfg(1, [{"type": "reload", "kwargs": {"mini_epoch": 0}}])
    res = train(run_up, tmp_path, "bad", cfg, code=2)
    assert "hooks[0].kwargs.mini_epoch: must be >= 1" in res.stderr
    cfg = base_cfg(1, [{"type": "reload", "kwargs": {"mini_epoch": 100}}])
    res = train(run_up, tmp_path, "bad2", cfg, code=2)
    assert "mini_epoch: 100 mini-epochs need at least as many samples, the training set has 48" in res.stderr


@pytest.mark.parametrize("group", [1, 3])
def test_rebuild_epochs(group):
    """Which epochs rebuild: 1+group, 1+2*group, ... (epoch 1 uses the builder's dataset)."""
    from types import SimpleNamespace

    from up_trainer.hooks.reload import Reload

    calls = []
    hook = Reload(group=group)
    hook.prepare = lambda trainer, epoch, rebuild: calls.append((epoch, rebuild)) or setattr(hook, "_prepared", epoch)
    tr = SimpleNamespace(state=SimpleNamespace(epoch=0, epoch_done=True))
    hook.before_train(tr)
    for epoch in range(1, 8):
        hook.before_train_loader(tr, epoch)
    want = [(1, False)] + [(e, (e - 1) % group == 0) for e in range(2, 8)]
    assert calls == want
