"""Optimizer and LR-schedule kwargs a hostile or careless YAML gives: NaN, infinity, quoted
numbers. Each is refused before the first step in one line naming the key, and the
checkpoints of the run already in the work dir are untouched."""
import pytest

from conftest import invoke
from hostile_helpers import assert_one_line, copy_run, fingerprint, tiny_cfg, trained_run, write_yaml  # noqa: F401

CASES = [
    # (what the YAML says, trainer section override, key named in the message)
    ("lr .nan", {"optimizer": {"type": "SGD", "kwargs": {"lr": float("nan")}}},
     "trainer.optimizer.kwargs.lr: must be a finite number, got nan"),
    ("lr .inf", {"optimizer": {"type": "SGD", "kwargs": {"lr": float("inf")}}},
     "trainer.optimizer.kwargs.lr: must be a finite number, got inf"),
    ("betas [0.9, -.inf]", {"optimizer": {"type": "Adam", "kwargs": {"lr": 0.01, "betas": [0.9, float("-inf")]}}},
     "trainer.optimizer.kwargs.betas[1]: must be a finite number"),
    ("lr '0.1'", {"optimizer": {"type": "SGD", "kwargs": {"lr": "0.1"}}},
     "trainer.optimizer.kwargs.lr: a quoted number '0.1' is a string here (write 0.1 without quotes)"),
    ("milestones ['1']", {"lr_scheduler": {"type": "MultiStepLR", "kwargs": {"milestones": ["1"]}}},
     "trainer.lr_scheduler.kwargs.milestones[0]: a quoted number '1'"),
    ("gamma .nan", {"lr_scheduler": {"type": "StepLR", "kwargs": {"step_size": 1, "gamma": float("nan")}}},
     "trainer.lr_scheduler.kwargs.gamma: must be a finite number"),
    ("warmup_ratio .nan", {"lr_scheduler": {"warmup_iter": 2, "warmup_ratio": float("nan")}},
     "trainer.lr_scheduler.warmup_ratio: must be a finite number"),
    ("paramwise lr_mult '0.1'", {"optimizer": {"type": "SGD", "kwargs": {"lr": 0.1},
                                               "paramwise_cfg": {"bias_lr_mult": "0.1"}}},
     "trainer.optimizer.paramwise_cfg.bias_lr_mult: a quoted number"),
]


@pytest.mark.parametrize("what,trainer,message", CASES, ids=[c[0] for c in CASES])
def test_bad_numbers_refused_in_one_line(tmp_path, trained_run, what, trainer, message):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    cfg = tiny_cfg(trainer={"max_epoch": 2, **trainer}, saver={"save_dir": "checkpoints", "auto_resume": True})
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path])
    assert_one_line(result, message)
    assert fingerprint(save_dir) == before


def test_nan_lr_yaml_spelling_is_refused(tmp_path):
    """The YAML spellings themselves (.nan, .inf, quoted) reach the check, not only Python floats."""
    with open(write_yaml(tmp_path / "cfg.yaml", tiny_cfg())) as f:
        text = f.read()
    assert "lr: 0.1" in text
    (tmp_path / "nan.yaml").write_text(text.replace("lr: 0.1", "lr: .NaN"))
    result = invoke(["train", "--config", tmp_path / "nan.yaml", "--work-dir", tmp_path])
    assert_one_line(result, "trainer.optimizer.kwargs.lr: must be a finite number, got nan")
    assert fingerprint(tmp_path / "checkpoints") == {}


def test_quoted_milestone_is_not_string_arithmetic(tmp_path):
    """--opts spelling: milestones=['1'] must not become '1' * updates_per_epoch."""
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(trainer={"max_epoch": 2, "lr_scheduler": {
        "type": "MultiStepLR", "kwargs": {"milestones": [1]}}}))
    result = invoke(["train", "--config", cfg, "--work-dir", tmp_path,
                     "--opts", "trainer.lr_scheduler.kwargs.milestones=['1']"])
    assert_one_line(result, "trainer.lr_scheduler.kwargs.milestones[0]: a quoted number '1'")
