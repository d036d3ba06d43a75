"""Shared test helpers: a tiny digits config and an in-process CLI runner."""
import os
import signal
import sys

import pytest
import torch
import yaml
from click.testing import CliRunner

from up_trainer.cli import main

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
PLUGINS = os.path.join(TESTS, "plugins")  # modules named in runtime.imports by tests
HELPERS = os.path.join(TESTS, "helpers")  # shared test helpers imported by name
UP_FIXTURES = os.path.join(TESTS, "fixtures", "up")  # UP's own config files, unchanged
# What a training subprocess started by a test needs on PYTHONPATH to import the plugins.
SUBPROCESS_PATH = os.pathsep.join([PLUGINS, HELPERS, TESTS, REPO])


def _test_module_dirs():
    """Every folder under tests/ holding test modules. Test modules share pieces by module name
    (``from test_train_e2e import train``), so every such folder is importable whatever order
    pytest collects them in; names are unique across folders (pytest's rootdir-less import mode
    needs that too)."""
    dirs = []
    for root, subdirs, files in os.walk(TESTS):
        subdirs[:] = sorted(d for d in subdirs if d not in ("fixtures", "__pycache__"))
        if any(f.startswith("test_") and f.endswith(".py") for f in files):
            dirs.append(root)
    return dirs


for _path in (*_test_module_dirs(), HELPERS, PLUGINS):
    if _path not in sys.path:
        sys.path.insert(0, _path)


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


def loader_cfg(**kw):
    """The dataset section's loader keys with their defaults, for building loaders directly."""
    cfg = {"batch_size": 4, "test_batch_size": None, "num_workers": 0, "pin_memory": False, "drop_last": False,
           "fix_seed": False, "aspect_ratio_groups": None, "alignment": 1, "pad_value": 0, "batch_fn": None}
    cfg.update(kw)
    return cfg


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


@pytest.fixture(autouse=True)
def stop_signal_handlers_kept():
    """Fail a test that leaves SIGINT / SIGTERM handled differently than it found them (a
    trainer whose before_train installed auto_checkpoint's handlers without its after_train):
    every later test in that process would swallow Ctrl-C and SIGTERM. The handlers are put
    back either way, so one leak fails one test, not the signal tests that happen to follow."""
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    ignored = os_ignored_signals()
    yield
    left = {sig: signal.getsignal(sig) for sig, handler in kept.items() if signal.getsignal(sig) is not handler}
    # Below Python: a native library can set the disposition with sigaction directly;
    # getsignal still names Python's handler, the kernel drops the signal, and every child
    # started later inherits the SIG_IGN.
    newly = (os_ignored_signals() - ignored) - set(left)
    for sig in left:
        signal.signal(sig, kept[sig])
    for sig in newly:
        signal.signal(sig, kept[sig])  # re-installs Python's handler with the kernel too
    if left or newly:
        pytest.fail("the test left signal handlers installed: " + ", ".join(
            [f"{signal.Signals(sig).name} -> {getattr(h, '__qualname__', h)}" for sig, h in left.items()]
            + [f"{signal.Signals(sig).name} -> SIG_IGN below Python" for sig in newly]))


def os_ignored_signals():
    """Signals the kernel ignores for this process (Linux /proc; empty elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    except (OSError, StopIteration, ValueError):
        return set()
    return {sig for sig in (signal.SIGINT, signal.SIGTERM) if mask >> (sig - 1) & 1}
