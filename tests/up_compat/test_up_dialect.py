"""UP's config dialect: anchor-only top-level keys, UP runtime keys and defaults, and UP's
per-split dataset / batch_sampler / dataloader forms translated into native keys."""
import pytest

from up_trainer.config import resolve_config
from up_trainer.config.anchors import anchor_only_keys
from up_trainer.errors import ConfigError

NATIVE = """
dataset:
  train: {type: digits, kwargs: {split: train}}
trainer: {max_epoch: 1}
net: {type: resnet18, kwargs: {num_classes: 10}}
"""

UP_FILE = """
num_classes: &num_classes 10
runtime:
  task_names: cls
flip: &flip
  type: torch_random_horizontal_flip
dataset:
  train:
    dataset:
      type: digits
      kwargs: {split: train, transformer: [*flip]}
    batch_sampler:
      type: base
      kwargs: {sampler: {type: dist, kwargs: {fix_seed: true}}, batch_size: 8}
    dataloader:
      type: cls_base
      kwargs:
        num_workers: 0
        pin_memory: true
        batch_fn: {type: batch_mixup, kwargs: {alpha: 0.2, num_classes: *num_classes}}
  test:
    dataset: {type: digits, kwargs: {split: test}}
    batch_sampler: {type: base, kwargs: {sampler: {type: dist, kwargs: {}}, batch_size: 4}}
    dataloader: {type: cls_base, kwargs: {num_workers: 0, pin_memory: false}}
trainer: {max_epoch: 1}
net:
- name: backbone
  type: resnet18
  kwargs: {num_classes: *num_classes}
"""


def write(tmp_path, text, name="a.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_anchor_only_keys_from_events():
    text = "a: &a 1\nb: &b {x: 1}\nc: &c 2\nd: *a\ne: {y: *b}\nf: *c\ng: 3\n"
    assert anchor_only_keys(text) == {"a", "b", "c"}
    # an alias as a top-level value is not an anchor holder; an unused anchor is not aliased
    assert anchor_only_keys("a: &a 1\nb: *a\nz: &z 5\n") == {"a"}
    assert anchor_only_keys("- &a 1\n- *a\n") == set()


def test_up_file_translated_into_native_keys(tmp_path):
    cfg = resolve_config(write(tmp_path, UP_FILE))
    assert "num_classes" not in cfg and "flip" not in cfg
    ds = cfg["dataset"]
    assert ds["train"] == {"type": "digits", "kwargs": {"split": "train",  # UP's transformer, renamed
                                                        "transforms": [{"type": "torch_random_horizontal_flip"}]}}
    assert ds["test"] == {"type": "digits", "kwargs": {"split": "test"}}
    assert (ds["batch_size"], ds["test_batch_size"], ds["fix_seed"], ds["pin_memory"]) == (8, 4, True, True)
    assert ds["batch_fn"] == {"type": "batch_mixup", "kwargs": {"alpha": 0.2, "num_classes": 10}}
    assert cfg["runtime"]["seed"] == 131 and cfg["runtime"]["rank_init"] is False
    origin = cfg["origin"]
    assert origin["form"] == "UP" and len(origin["sha256"]) == 64
    assert any("random_seed: 131" in n for n in origin["notes"])
    assert any("pin_memory" in n and "differs" in n for n in origin["notes"])
    assert "dataset.train.kwargs.transformer: read as transforms" in origin["notes"]


def test_evaluator_in_dataset_kwargs_moves_to_dataset_evaluator(tmp_path):
    """UP keeps the evaluator in a dataset's kwargs: the translation moves the first one found
    to dataset.evaluator, so what builds the run reads one place."""
    up_eval = {"type": "imagenet", "kwargs": {"topk": [1]}}
    text = UP_FILE.replace("kwargs: {split: test}", "kwargs: {split: test, evaluator: {type: imagenet, kwargs: "
                           "{topk: [1]}}}")
    assert text != UP_FILE
    cfg = resolve_config(write(tmp_path, text))
    assert cfg["dataset"]["evaluator"] == up_eval and cfg["dataset"]["test"]["kwargs"] == {"split": "test"}
    assert "dataset.test.kwargs.evaluator: moved to dataset.evaluator" in cfg["origin"]["notes"]
    given = {"type": "imagenet", "kwargs": {"topk": [1, 2]}}
    cfg = resolve_config(write(tmp_path, text), opts=["dataset.evaluator={type: imagenet, kwargs: {topk: [1, 2]}}"])
    assert cfg["dataset"]["evaluator"] == given and "evaluator" not in cfg["dataset"]["test"]["kwargs"]
    assert "dataset.test.kwargs.evaluator: not used (dataset.evaluator is given)" in cfg["origin"]["notes"]


def test_native_file_keeps_native_defaults(tmp_path):
    cfg = resolve_config(write(tmp_path, NATIVE))
    assert "origin" not in cfg
    assert cfg["runtime"]["seed"] == 0 and cfg["runtime"]["rank_init"] is True


def test_unknown_top_level_keys_still_fail(tmp_path):
    with pytest.raises(ConfigError, match=r"trainr: unknown section .*did you mean 'trainer'"):
        resolve_config(write(tmp_path, NATIVE + "trainr: {max_epoch: 2}\n"))
    # an anchor nothing aliases does not make a key acceptable
    with pytest.raises(ConfigError, match="width: unknown section"):
        resolve_config(write(tmp_path, NATIVE + "width: &width 3\n"))


def test_up_top_level_leftovers_recorded(tmp_path):
    text = UP_FILE + ("fp16: {keep_batchnorm_fp32: true}\nunused_crop:\n  type: torch_center_crop\n"
                      "lr_scheduler: {type: StepLR, kwargs: {step_size: 1}}\n")
    cfg = resolve_config(write(tmp_path, text))
    assert cfg["runtime"]["fp16"] is False
    assert cfg["trainer"]["lr_scheduler"]["type"] == "StepLR"
    notes = "\n".join(cfg["origin"]["notes"])
    assert "fp16: UP reads runtime.fp16" in notes and "unused_crop: a torch_center_crop definition" in notes
    assert "moved under trainer" in notes


def test_up_runtime_keys_and_explicit_seed(tmp_path):
    text = UP_FILE.replace("task_names: cls", "task_names: cls\n  random_seed: 5\n  special_bn_init: true\n"
                                              "  async_norm: true\n  aligned: true\n  rank_init: true")
    cfg = resolve_config(write(tmp_path, text))
    rt = cfg["runtime"]
    assert (rt["seed"], rt["special_bn_init"], rt["aligned"], rt["rank_init"]) == (5, True, True, True)
    assert {"type": "sync_buffers", "kwargs": {"mode": "mean"}} in cfg["hooks"]
    assert any("aligned" in n for n in cfg["origin"]["notes"])


def test_opts_on_up_paths_and_native_key_wins(tmp_path):
    p = write(tmp_path, UP_FILE)
    cfg = resolve_config(p, ["dataset.train.batch_sampler.kwargs.batch_size=2"])
    assert cfg["dataset"]["batch_size"] == 2
    cfg = resolve_config(p, ["dataset.batch_size=3"])
    assert cfg["dataset"]["batch_size"] == 3
    assert any("dataset.batch_size: 3 given explicitly" in n for n in cfg["origin"]["notes"])


def test_shared_loader_keys_and_aspect_groups(tmp_path):
    text = NATIVE.replace("dataset:\n", "dataset:\n  batch_sampler: {type: aspect_ratio_group, kwargs: "
                          "{sampler: {type: dist}, batch_size: 2, aspect_grouping: [1]}}\n"
                          "  dataloader: {type: base, kwargs: {num_workers: 0, alignment: 32, pad_value: 0.5}}\n")
    ds = resolve_config(write(tmp_path, text))["dataset"]
    assert (ds["batch_size"], ds["aspect_ratio_groups"], ds["alignment"], ds["pad_value"]) == (2, [1], 32, 0.5)


@pytest.mark.parametrize("edit,match", [
    ("type: base\n      kwargs: {sampler: {type: dist", None),
    # repeat_factor maps (dataset.repeat_factor); fix_seed is a dist sampler kwarg, not one of its
    ("type: base\n      kwargs: {sampler: {type: repeat_factor", r"repeat_factor.fix_seed: unknown key \(accepted: t, pn"),
    ("type: bse\n      kwargs: {sampler: {type: dist", r"batch_sampler.type: unknown type 'bse'.*did you mean 'base'"),
])
def test_bad_up_loader_entries(tmp_path, edit, match):
    text = UP_FILE.replace("type: base\n      kwargs: {sampler: {type: dist", edit, 1)
    if match is None:
        resolve_config(write(tmp_path, text))
        return
    with pytest.raises(ConfigError, match=match):
        resolve_config(write(tmp_path, text))


def test_unknown_key_in_up_split(tmp_path):
    text = UP_FILE.replace("    dataloader:\n      type: cls_base", "    dataloder:\n      type: cls_base", 1)
    with pytest.raises(ConfigError, match=r"dataset.train.dataloder: unknown key.*did you mean 'dataloader'"):
        resolve_config(write(tmp_path, text))


def test_config_command_prints_up_form_header(tmp_path, run_up):
    res = run_up(["config", "--config", write(tmp_path, UP_FILE)])
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("# UP form: ") and "random_seed: 131 (UP's default)" in res.stdout


def test_translated_config_reloads_with_its_origin(tmp_path):
    import yaml

    first = resolve_config(write(tmp_path, UP_FILE))
    again = resolve_config(write(tmp_path, yaml.safe_dump(first), name="config.yaml"))
    assert again["origin"] == first["origin"]  # the original file and its notes stay on record
    assert again["dataset"] == first["dataset"] and again["runtime"]["seed"] == 131
