"""yolox_noaug: the last no_aug_epoch epochs train on the plain pipeline with the L1 loss on and
the hook's own test frequency; a run resumed at the switch, or after it, is bitwise equal to
one that never stopped; bad kwargs are one line."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import tiny_cfg, write_cfg
from up_trainer.engine.builder import build_hooks
from up_trainer.errors import ConfigError
from up_trainer.hooks.base import Hook
from up_trainer.registry import HOOKS, MODELS

import ctrl_plugin  # noqa: F401  (registers test_fault)

seen = {}  # epoch -> {"min": smallest pixel trained on, "l1": iterations with loss_l1}
evals = []  # epochs evaluated


@MODELS.register("test_l1_convnet")
class L1ConvNet(nn.Module):
    """Test only: a tiny classifier with YOLOX's ``use_l1`` switch (an extra loss when on)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.use_l1 = False
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, batch):
        logits = self.fc(F.relu(self.conv(batch["image"])).mean(dim=(2, 3)))
        out = {"logits": logits, "scores": logits.softmax(1), "preds": logits.argmax(1)}
        if "label" in batch:
            out["loss"] = F.cross_entropy(logits, batch["label"])
            if self.use_l1:
                out["loss_l1"] = 0.1 * logits.abs().mean()
        return out


@HOOKS.register("test_noaug_probe")
class NoAugProbe(Hook):
    priority = "LOWEST"

    def before_forward(self, trainer, iteration, batch):
        rec = seen.setdefault(trainer.state.epoch, {"min": float("inf"), "l1": 0, "sizes": set()})
        images = batch["image"] if isinstance(batch["image"], list) else [batch["image"]]
        rec["min"] = min([rec["min"]] + [float(im.min()) for im in images])
        rec["sizes"].update(tuple(im.shape[-2:]) for im in images)

    def after_forward(self, trainer, iteration, outputs):
        seen[trainer.state.epoch]["l1"] += "loss_l1" in outputs

    def after_eval(self, trainer, metrics):
        evals.append(trainer.state.epoch)


def clear():
    seen.clear(), evals.clear()


# Augmenting pipeline: flips (pixels stay in [0, 1]); plain pipeline: a shift that makes every
# pixel negative, so the probe sees which one a batch went through.
AUG = [{"type": "torch_random_horizontal_flip", "kwargs": {"p": 0.5}}]
PLAIN = [{"type": "normalize", "kwargs": {"mean": [2.0], "std": [1.0]}}]


def noaug_cfg(extra_hooks=()):
    cfg = tiny_cfg(trainer={"max_epoch": 4, "test_freq": 2})
    cfg["runtime"]["num_threads"] = 1
    cfg["dataset"]["train"]["kwargs"].update(subset=48, transforms=AUG)
    cfg["dataset"]["test"]["kwargs"]["subset"] = 16
    cfg["net"] = {"type": "test_l1_convnet"}
    cfg["hooks"] = [{"type": "reload"},  # rebuilds every epoch: from the plain entry after the switch
                    {"type": "yolox_noaug", "kwargs": {"no_aug_epoch": 2, "max_epoch": 4, "transformer": PLAIN,
                                                       "test_freq": 1}},
                    {"type": "test_noaug_probe"}, *extra_hooks]
    cfg["default_hooks"] = {"logger": {"type": "train_val_logger", "kwargs": {"summary_writer": "none", "plot": False}},
                            "best": None}
    return cfg


def train(run_up, tmp_path, name, cfg, *extra, code=0, work=None):
    res = run_up(["train", "--config", write_cfg(tmp_path / f"{name}.yaml", cfg),
                  "--work-dir", work or tmp_path / name, *extra])
    assert res.exit_code == code, (res.stdout[-3000:], res.stderr, res.exception)
    return res


def weights(path):
    return torch.load(path, weights_only=True)


def assert_same(a, b):
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["iter"] == b["iter"] == 12
    assert a["hooks"]["yolox_noaug"] == b["hooks"]["yolox_noaug"] == {"switched": True, "switch_epoch": 3}


def test_switch_and_resume_bitwise_at_and_after_it(tmp_path, run_up):
    clear()
    res = train(run_up, tmp_path, "straight", noaug_cfg())
    assert [seen[e]["min"] >= 0 for e in (1, 2, 3, 4)] == [True, True, False, False]
    assert [seen[e]["l1"] for e in (1, 2, 3, 4)] == [0, 0, 3, 3]  # 48 samples, batch 16
    assert evals == [2, 3, 4]  # test_freq 2, then the hook's 1
    assert "yolox_noaug: epoch 3 on trains without the mixing augmentation (pipeline: normalize), L1 loss on" \
        in res.stdout
    straight = tmp_path / "straight" / "checkpoints"

    # Killed right at the switch: resume from the end of epoch 2 (saved before the switch).
    clear()
    train(run_up, tmp_path, "at", noaug_cfg([{"type": "test_fault", "kwargs": {"raise_at": 7}}]), code=1)
    clear()
    train(run_up, tmp_path, "at2", noaug_cfg(), "--resume", tmp_path / "at" / "checkpoints" / "ckpt_e2.pth",
          work=tmp_path / "at")
    assert seen[3]["min"] < 0 and seen[3]["l1"] == 3 and evals == [3, 4]
    assert_same(weights(straight / "ckpt_e4.pth"), weights(tmp_path / "at" / "checkpoints" / "ckpt_e4.pth"))

    # Killed mid-way through the first plain epoch: resume from the exception snapshot.
    clear()
    train(run_up, tmp_path, "mid", noaug_cfg([{"type": "test_fault", "kwargs": {"raise_at": 9}}]), code=1)
    snap = tmp_path / "mid" / "checkpoints" / "ckpt_e3-i8.pth"
    assert weights(snap)["hooks"]["yolox_noaug"]["switched"] is True
    clear()
    train(run_up, tmp_path, "mid2", noaug_cfg(), "--resume", snap, work=tmp_path / "mid")
    assert seen[3]["l1"] == 1 and seen[3]["min"] < 0  # the last batch of epoch 3, plain, with L1
    assert_same(weights(straight / "ckpt_e4.pth"), weights(tmp_path / "mid" / "checkpoints" / "ckpt_e4.pth"))


def noaug(**kwargs):
    return build_hooks([{"type": "yolox_noaug", "kwargs": {"transformer": PLAIN, **kwargs}}])


@pytest.mark.parametrize("kwargs, message", [
    ({"no_aug_epoch": 301}, "hooks[0].kwargs.no_aug_epoch: must be between 0 (never) and max_epoch = 300 (from the "
                            "first epoch), got 301"),
    ({"no_aug_epoch": -1, "max_epoch": 10}, "no_aug_epoch: must be between 0 (never) and max_epoch = 10 (from the "
                                            "first epoch), got -1"),
    ({"max_epoch": 1}, "hooks[0].kwargs.max_epoch: must be >= 2, got 1"),
    ({"test_freq": 0}, "hooks[0].kwargs.test_freq: must be >= 1, got 0"),
    ({"transformer": []}, "hooks[0].kwargs.transformer: expected the training pipeline"),
    ({"transformer": [{"type": "flipp"}]}, "hooks[0].kwargs.transformer[0].type: unknown transform 'flipp'"),
    ({"no_aug_epoch": 2.5}, "hooks[0].kwargs.no_aug_epoch: expected int, got float 2.5"),
])
def test_bad_kwargs_are_one_line(kwargs, message):
    with pytest.raises(ConfigError) as info:
        noaug(**kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cli_refuses_bad_kwargs_and_lists_the_hook_once_per_run(tmp_path, run_up):
    cfg = noaug_cfg()
    cfg["hooks"][1]["kwargs"]["no_aug_epoch"] = 5  # a native file's count beyond max_epoch is refused, not read down
    res = train(run_up, tmp_path, "bad", cfg, code=2)
    assert res.stderr.strip().splitlines() == [
        "up: error: hooks[1].kwargs.no_aug_epoch: must be between 0 (never) and max_epoch = 4 (from the first epoch), "
        "got 5"]
    res = run_up(["hooks", "yolox_noaug"])
    assert res.exit_code == 0 and "yolox_noaug  priority VERY_HIGH (10), one per run" in res.stdout
    assert "transformer: required" in res.stdout and "no_aug_epoch: 15" in res.stdout


def test_a_model_without_use_l1_is_named_at_start_up(tmp_path, run_up):
    clear()
    cfg = noaug_cfg()
    cfg["net"] = {"type": "tiny_convnet", "kwargs": {"num_classes": 10}}
    cfg["runtime"]["imports"] = ["tiny_net_plugin"]
    cfg["trainer"]["max_epoch"] = 3
    cfg["hooks"][1]["kwargs"].update(max_epoch=3, no_aug_epoch=1)
    res = train(run_up, tmp_path, "nol1", cfg)
    out = res.stdout + res.stderr
    assert "yolox_noaug: the model (TinyConvNet) has no use_l1 attribute" in out
    assert seen[3]["min"] < 0 and seen[2]["min"] >= 0


def test_yolox_on_mosaic_scenes_resumes_bitwise_across_the_switch(tmp_path, run_up):
    """The real thing, tiny: YOLOX on digit scenes, mosaic + perspective for two epochs, then the
    plain pipeline with the L1 loss; a run killed in the first plain epoch resumes bitwise."""
    clear()
    mosaic = [{"type": "mosaic", "kwargs": {"tar_size": 48}},
              {"type": "random_perspective_yolox", "kwargs": {"degrees": 10.0, "scale": [0.5, 1.5],
                                                              "border": [-24, -24]}},
              {"type": "flip", "kwargs": {"flip_p": 0.5}}]
    plain = [{"type": "flip", "kwargs": {"flip_p": 0.5}},
             {"type": "keep_ar_resize_max", "kwargs": {"max_size": 64, "padding_type": "left_top"}}]

    def cfg(extra=()):
        c = noaug_cfg(extra)
        c["dataset"] = {"train": {"type": "digits_det", "kwargs": {"num_images": 8, "canvas_size": 48,
                                                                    "transforms": mosaic}},
                        "test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 2, "canvas_size": 48}},
                        "batch_size": 4, "test_batch_size": 2}
        c["net"] = {"type": "yolox", "kwargs": {"size": "nano", "width": 0.125, "num_classes": 10}}
        c["trainer"] = {"max_epoch": 3, "test_freq": 10, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.01}}}
        c["hooks"][1]["kwargs"].update(no_aug_epoch=1, max_epoch=3, transformer=plain)
        c["ema"] = {"enable": True, "ema_type": "exp", "kwargs": {"decay": 0.9}}
        return c

    train(run_up, tmp_path, "straight", cfg())
    assert [seen[e]["l1"] for e in (1, 2, 3)] == [0, 0, 2]  # 8 scenes, batch 4
    assert seen[1]["sizes"] == seen[2]["sizes"] == {(48, 48)}  # mosaic canvas 96, border -24
    assert seen[3]["sizes"] == {(64, 64)}  # resized and padded to a square
    assert evals == [3]
    train(run_up, tmp_path, "mid", cfg([{"type": "test_fault", "kwargs": {"raise_at": 6}}]), code=1)
    snap = tmp_path / "mid" / "checkpoints" / "ckpt_e3-i5.pth"
    train(run_up, tmp_path, "mid2", cfg(), "--resume", snap, work=tmp_path / "mid")
    a = weights(tmp_path / "straight" / "checkpoints" / "ckpt_e3.pth")
    b = weights(tmp_path / "mid" / "checkpoints" / "ckpt_e3.pth")
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for k in a["ema"]["model"]:
        assert torch.equal(a["ema"]["model"][k], b["ema"]["model"][k]), k
    assert a["iter"] == b["iter"] == 6


def test_the_switch_keeps_aspect_ratio_groups(tmp_path, run_up):
    """A training set released before its rebuild has no image sizes: the loader regroups the
    rebuilt one (with aspect_ratio_groups, as with reload)."""
    clear()
    c = noaug_cfg()
    c["dataset"] = {"train": {"type": "digits_det", "kwargs": {"num_images": 8, "canvas_size": 48}},
                    "batch_size": 4, "aspect_ratio_groups": [1]}
    c["net"] = {"type": "yolox", "kwargs": {"size": "nano", "width": 0.125, "num_classes": 10}}
    c["trainer"] = {"max_epoch": 2, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.01}}}
    plain = [{"type": "keep_ar_resize_max", "kwargs": {"max_size": 32}}]
    c["hooks"][1]["kwargs"].update(no_aug_epoch=1, max_epoch=2, transformer=plain)
    train(run_up, tmp_path, "groups", c)
    assert seen[1]["sizes"] == {(48, 48)} and seen[2]["sizes"] == {(32, 32)} and seen[2]["l1"] == 2


def test_a_up_files_count_beyond_max_epoch_switches_before_the_first_epoch_as_ups_hook(tmp_path, run_up):
    """UP's hook switches once iteration >= epoch_size x (max_epoch - no_aug_epoch), i.e. from the
    first iteration when no_aug_epoch > max_epoch (UP's yolox_fpga_quant_vitis_qat.yaml: 15 of 5):
    a UP-form file (runtime.task_names) trains every epoch on the plain pipeline with the L1 loss,
    and up config says why. The same count in a native file is refused (above)."""
    cfg = noaug_cfg()
    cfg["runtime"]["task_names"] = "cls"  # read as UP form
    cfg["hooks"][1]["kwargs"].update(no_aug_epoch=15, max_epoch=4)
    res = run_up(["config", "--config", write_cfg(tmp_path / "up.yaml", cfg)])
    assert res.exit_code == 0, res.stderr
    assert "hooks[1].kwargs.no_aug_epoch: 15 > max_epoch 4: UP's hook switches before the first iteration, so " \
           "every epoch trains on its transformer with the L1 loss; read as 4 (from epoch 1)" in res.stdout
    clear()
    res = train(run_up, tmp_path, "up", cfg)
    assert [seen[e]["min"] < 0 for e in (1, 2, 3, 4)] == [True] * 4
    assert [seen[e]["l1"] for e in (1, 2, 3, 4)] == [3] * 4
    assert evals == [1, 2, 3, 4]  # the hook's test_freq 1 from the start
    assert "yolox_noaug: epoch 1 on trains without the mixing augmentation (pipeline: normalize), L1 loss on" \
        in res.stdout

