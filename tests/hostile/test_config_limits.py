"""Configs built to hurt: endless files, alias bombs, absurd nesting, huge values, a hook
listed twice, a non-string import. Each fails at once in one line naming where, exit 2, and
the checkpoints already in the run dir stay as they were."""
import time

import pytest

from conftest import invoke
from hostile_helpers import assert_one_line, fingerprint, seed_checkpoint, tiny_cfg
from hostile_helpers import write_yaml as write_cfg

LEVELS = "abcdefghi"


def alias_bomb(width=9, levels=9):
    """A YAML flow list whose item k lists item k-1 ``width`` times: width**levels values once
    expanded, in a few hundred bytes."""
    items = [f"&{LEVELS[0]} [{', '.join(['lol'] * width)}]"]
    for prev, cur in zip(LEVELS[:levels - 1], LEVELS[1:levels]):
        items.append(f"&{cur} [{', '.join(['*' + prev] * width)}]")
    return "[" + ", ".join(items) + "]"


def with_text(body):
    """A config file: the tiny config as _base_, then ``body``."""
    def build(tmp_path):
        base = write_cfg(tmp_path / "base.yaml", tiny_cfg())
        path = tmp_path / "cfg.yaml"
        path.write_text(f"_base_: {base}\n" + body(tmp_path))
        return str(path)
    return build


def write_text(tmp_path, text):
    write_cfg(tmp_path / "base.yaml", tiny_cfg())
    (tmp_path / "cfg.yaml").write_text(text)
    return str(tmp_path / "cfg.yaml")


def bomb_in_typed_key(tmp_path):
    # below the expansion cap (9**5 values) but far too big to print: the message quotes a slice
    return f"trainer: {{max_epoch: {alias_bomb(levels=5)}}}\n"


CASES = [
    ("--config /dev/zero", lambda tmp_path: "/dev/zero", "config file /dev/zero is a character device, not a regular file"),
    ("_base_: /dev/zero", lambda tmp_path: write_text(tmp_path, "_base_: [base.yaml, /dev/zero]\n"),
     "_base_ file /dev/zero is a character device, not a regular file"),
    ("5 MiB config file", with_text(lambda tmp_path: "#" * (5 * 2**20) + "\n"), "is larger than 4 MiB"),
    ("alias bomb", with_text(lambda tmp_path: f"net: {{kwargs: {{x: {alias_bomb()}}}}}\n"),
     "expands to more than 200000 values"),
    ("nesting 500 deep", with_text(lambda tmp_path: "net: " + "[" * 500 + "]" * 500 + "\n"),
     "is nested deeper than 100 levels"),
    ("nested mappings 500 deep", with_text(lambda tmp_path: "net: " + "{a: " * 500 + "1" + "}" * 500 + "\n"),
     "is nested deeper than 100 levels"),
    ("alias bomb in a typed key", with_text(bomb_in_typed_key), ("trainer.max_epoch: expected int", "got list [[")),
    ("megabyte string in a typed key", with_text(lambda tmp_path: f"trainer: {{max_epoch: {'x' * 2_000_000}}}\n"),
     ("trainer.max_epoch: expected int", "got str 'xxxx")),
    ("runtime.imports: [1]", with_text(lambda tmp_path: "runtime: {imports: [1]}\n"),
     "runtime.imports[0]: expected a module name like my_pkg.hooks, got int 1"),
    ("worker_transport: shm", with_text(lambda tmp_path: "dataset: {num_workers: 1, worker_transport: shm}\n"),
     ("dataset.worker_transport", "ring", "torch")),
    ("worker_transport: [ring]", with_text(lambda tmp_path: "dataset: {worker_transport: [ring]}\n"),
     "dataset.worker_transport: expected str"),
    ("ema listed twice", with_text(lambda tmp_path: "hooks: [{type: ema}, {type: ema}]\n"),
     "hooks[1]: ema is listed twice (first at hooks[0]); it cannot run twice"),
    ("grad_clipper listed twice", with_text(
        lambda tmp_path: "hooks: [{type: grad_clipper, kwargs: {max_norm: 1}}, {type: grad_clipper}]\n"),
     "hooks[1]: grad_clipper is listed twice"),
]


@pytest.mark.parametrize("name,build,expected", CASES, ids=[c[0] for c in CASES])
def test_hostile_config_fails_fast_in_one_line(tmp_path, name, build, expected):
    run_dir = tmp_path / "run"
    before = seed_checkpoint(run_dir / "checkpoints")
    t0 = time.perf_counter()
    res = invoke(["train", "--config", build(tmp_path), "--work-dir", run_dir])
    elapsed = time.perf_counter() - t0
    line = assert_one_line(res, *((expected,) if isinstance(expected, str) else expected))
    assert len(line) < 600, len(line)  # values are quoted in slices, never in full
    assert elapsed < 30, elapsed  # no endless read, no exponential walk
    assert fingerprint(run_dir / "checkpoints") == before


def test_opts_value_goes_through_the_same_limits(tmp_path):
    cfg = write_cfg(tmp_path / "cfg.yaml", tiny_cfg())
    res = invoke(["config", "--config", cfg, "--opts", "net.kwargs.x=" + "[" * 300 + "]" * 300])
    assert_one_line(res, "is nested deeper than 100 levels")


def test_hooks_that_may_repeat_say_so(tmp_path):
    """early_stopping (own monitor) may be listed twice; `up hooks` tells which may repeat.
    Its state is saved by key, so the repeat carries a name (tests/hostile/test_hook_state_keys.py)."""
    from up_trainer.engine.builder import build_hooks

    hooks = build_hooks([{"type": "early_stopping", "kwargs": {"patience": 2}},
                         {"type": "early_stopping", "name": "by_top5", "kwargs": {"monitor": "top5"}}])
    assert [h.name for h in hooks] == ["early_stopping", "by_top5"]
    res = invoke(["hooks"])
    assert res.exit_code == 0
    assert "early_stopping  priority LOW (70), may be listed more than once" in res.stdout
    heads = {line.split()[0]: line for line in res.stdout.splitlines() if "  priority " in line}
    assert heads["ema"].endswith("one per run") and heads["auto_checkpoint"].endswith("one per run")
