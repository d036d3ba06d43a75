"""Config loading: safe YAML, anchors, _base_ inheritance, --opts, schema defaults."""
import pytest

from up_trainer.config import DEFAULT_HOOKS, resolve_config
from up_trainer.config.loader import deep_merge, load_file, parse_yaml
from up_trainer.config.opts import apply_opts
from up_trainer.errors import ConfigError

MINIMAL = """
dataset:
  train: {type: digits, kwargs: {split: train}}
  test: {type: digits, kwargs: {split: test}}
trainer: {max_epoch: 3}
net: {type: resnet18, kwargs: {num_classes: 10}}
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_defaults_filled_and_default_hooks_added(tmp_path):
    cfg = resolve_config(write(tmp_path, "a.yaml", MINIMAL))
    t = cfg["trainer"]
    assert (t["test_freq"], t["test_start"], t["save_freq"], t["save_start"]) == (1, 1, 1, 1)
    assert (t["save_cur_start"], t["save_cur_freq"]) == (-1, 1)
    assert cfg["saver"]["save_dir"] == "checkpoints"
    assert [h["type"] for h in cfg["hooks"]] == [d["type"] for d in DEFAULT_HOOKS.values()]


def test_default_hook_switched_off_and_listed_hook_not_duplicated(tmp_path):
    text = MINIMAL + "default_hooks: {logger: null}\nhooks:\n  - {type: auto_save_best, kwargs: {mode: min}}\n"
    cfg = resolve_config(write(tmp_path, "a.yaml", text))
    types = [h["type"] for h in cfg["hooks"]]
    assert "train_val_logger" not in types
    assert types.count("auto_save_best") == 1 and cfg["hooks"][0]["kwargs"] == {"mode": "min"}


def test_up_seed_alias_and_up_dataset_form(tmp_path):
    text = """
runtime: {random_seed: 7}
dataset:
  train: {dataset: {type: digits, kwargs: {split: train}}}
  batch_sampler: {type: base, kwargs: {batch_size: 16}}
  dataloader: {type: base, kwargs: {num_workers: 0}}
trainer: {max_epoch: 1}
net: {type: resnet18}
"""
    cfg = resolve_config(write(tmp_path, "a.yaml", text))
    assert cfg["runtime"]["seed"] == 7
    assert cfg["dataset"]["train"] == {"type": "digits", "kwargs": {"split": "train"}}
    assert cfg["dataset"]["batch_size"] == 16


def test_anchors_and_merge_keys(tmp_path):
    text = MINIMAL + "x_common: &opt {type: SGD, kwargs: {lr: 0.5}}\n"
    with pytest.raises(ConfigError, match="x_common: unknown section"):
        resolve_config(write(tmp_path, "a.yaml", text))
    data = parse_yaml("a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  y: 3\n")
    assert data["b"] == {"x": 1, "y": 3}


def test_python_tag_rejected(tmp_path):
    p = write(tmp_path, "a.yaml", "trainer: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ConfigError, match="python object tags are not allowed"):
        load_file(p)


def test_base_inheritance_relative_and_deep_merge(tmp_path):
    (tmp_path / "sub").mkdir()
    write(tmp_path, "base.yaml", MINIMAL + "saver: {save_dir: ck, auto_resume: true}\n")
    child = write(tmp_path / "sub", "child.yaml", "_base_: ../base.yaml\ntrainer: {max_epoch: 9}\nsaver: {save_dir: other}\n")
    cfg = resolve_config(child)
    assert cfg["trainer"]["max_epoch"] == 9
    assert cfg["saver"]["save_dir"] == "other" and cfg["saver"]["auto_resume"] is True
    assert cfg["net"]["type"] == "resnet18"


def test_base_list_order_and_delete():
    assert deep_merge({"a": {"x": 1, "y": 2}}, {"a": {"_delete_": True, "z": 3}}) == {"a": {"z": 3}}
    assert deep_merge({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}


def test_base_cycle_detected(tmp_path):
    a = write(tmp_path, "a.yaml", "_base_: b.yaml\n")
    write(tmp_path, "b.yaml", "_base_: [a.yaml]\n")
    with pytest.raises(ConfigError, match="inheritance cycle: a.yaml -> b.yaml -> a.yaml"):
        load_file(a)


def test_opts_paths_indexes_and_hook_by_type(tmp_path):
    text = MINIMAL + "hooks:\n  - {type: grad_clipper, kwargs: {mode: pre_defined, max_norm: 1}}\n"
    cfg = resolve_config(write(tmp_path, "a.yaml", text), [
        "trainer.max_epoch=5",
        "hooks.grad_clipper.kwargs.max_norm=5.5",
        "hooks.1.kwargs.freq=3",
        "dataset.train.kwargs.split=all",
        "saver.resume_model=null",
        "trainer.optimizer={type: AdamW, kwargs: {lr: 0.001}}",
    ])
    assert cfg["trainer"]["max_epoch"] == 5
    assert cfg["hooks"][0]["kwargs"]["max_norm"] == 5.5
    assert cfg["hooks"][1] == {"type": "train_val_logger", "kwargs": {"freq": 3}}
    assert cfg["dataset"]["train"]["kwargs"]["split"] == "all"
    assert cfg["trainer"]["optimizer"] == {"type": "AdamW", "kwargs": {"lr": 0.001}}


@pytest.mark.parametrize("opt,match", [
    ("trainer.max_epoch", "expected KEY=VALUE"),
    ("hooks.9.kwargs.freq=1", r"hooks\[9\]: list index out of range"),
    ("hooks.nope.kwargs.x=1", "hooks.nope: no hook of this type"),
    ("trainer..x=1", "empty key path"),
    ("trainer.max_epoch=[1", "not a YAML scalar"),
    ("trainer.max_epoch.x=1", "cannot set 'x' inside a int"),
])
def test_bad_opts(tmp_path, opt, match):
    with pytest.raises(ConfigError, match=match):
        resolve_config(write(tmp_path, "a.yaml", MINIMAL), [opt])


def test_apply_opts_negative_index():
    cfg = {"hooks": [{"type": "a"}, {"type": "b"}]}
    apply_opts(cfg, ["hooks.-1.kwargs=null"])
    assert cfg["hooks"][1]["kwargs"] is None
