"""Shared test helpers: a tiny digits config and an in-process CLI runner."""
import os

import pytest
import torch
import yaml
from click.testing import CliRunner

from up_trainer.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_cfg(**sections):
    """A fast classification config on digits subsets (resnet18, small-input stem)."""
    cfg = {
        "runtime": {"seed": 3},
        "dataset": {
            "train": {"type": "digits", "kwargs": {"split": "train", "subset": 96}},
            "test": {"type": "digits", "kwargs": {"split": "test", "subset": 48}},
            "batch_size": 16,
            "test_batch_size": 48,
        },
        "trainer": {"max_epoch": 2, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.05, "momentum": 0.9}}},
        "saver": {"save_dir": "checkpoints"},
        "net": {"type": "resnet18", "kwargs": {"num_classes": 10, "in_channels": 1, "small_input": True}},
    }
    return merge_sections(cfg, sections)


def merge_sections(cfg, sections):
    """Override whole sections; a mapping given for a mapping section updates its keys."""
    for name, value in sections.items():
        if isinstance(value, dict) and isinstance(cfg.get(name), dict):
            cfg[name] = {**cfg[name], **value}
        else:
            cfg[name] = value
    return cfg


def write_cfg(path, cfg):
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    return str(path)


class CliResult:
    def __init__(self, result):
        self.exit_code = result.exit_code
        self.stdout = result.stdout
        self.stderr = result.stderr
        self.exception = result.exception


def invoke(args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)
    return CliResult(result)


@pytest.fixture
def run_up():
    return invoke


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` (tests/gpu/) are skipped cleanly where torch sees no CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA: torch.cuda.is_available() is false")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
