"""up_trainer.load_config: the CLI's resolution, raising ConfigError with the key path."""
import pytest
import yaml

import up_trainer
from conftest import invoke, tiny_cfg, write_cfg


def test_a_file_resolves_as_the_cli_resolves_it(tmp_path):
    path = write_cfg(tmp_path / "c.yaml", tiny_cfg())
    cfg = up_trainer.load_config(path, opts=["trainer.max_epoch=3", "hooks.train_val_logger.kwargs.freq=5"])
    assert isinstance(cfg, up_trainer.Config) and cfg.source == path and cfg.files == [path]
    assert cfg["trainer"]["max_epoch"] == 3
    assert {h["type"] for h in cfg["hooks"]} >= {"train_val_logger", "auto_checkpoint", "auto_save_best"}
    logger = next(h for h in cfg["hooks"] if h["type"] == "train_val_logger")
    assert logger["kwargs"]["freq"] == 5
    # `up config` prints the same resolution
    shown = invoke(["config", "--config", path, "--opts", "trainer.max_epoch=3",
                    "hooks.train_val_logger.kwargs.freq=5"])
    assert shown.exit_code == 0, shown.stderr
    printed = yaml.safe_load(shown.stdout)
    assert printed["trainer"] == cfg["trainer"] and printed["hooks"] == cfg["hooks"]


def test_a_mapping_resolves_like_the_same_file(tmp_path):
    data = tiny_cfg()
    from_dict = up_trainer.load_config(data, opts=["runtime.seed=7"])
    from_file = up_trainer.load_config(write_cfg(tmp_path / "c.yaml", data), opts=["runtime.seed=7"])
    assert dict(from_dict) == dict(from_file)
    assert from_dict.source is None and from_dict.files == []
    assert data == tiny_cfg(), "the caller's mapping is not changed"
    assert yaml.safe_load(yaml.safe_dump(from_dict.to_dict())) == dict(from_dict)


def test_a_mapping_may_name_base_files(tmp_path, monkeypatch):
    write_cfg(tmp_path / "base.yaml", tiny_cfg())
    monkeypatch.chdir(tmp_path)
    cfg = up_trainer.load_config({"_base_": "base.yaml", "trainer": {"max_epoch": 4}})
    assert cfg["trainer"]["max_epoch"] == 4 and cfg["net"]["type"] == "resnet18"
    assert cfg.files == ["base.yaml"]


@pytest.mark.parametrize("opts, path", [
    (["trainer.max_epoch=-1"], "trainer.max_epoch"),
    (["dataset.batch_size=many"], "dataset.batch_size"),
    (["hooks.grad_clipper.kwargs.max_norm=5"], "hooks"),
    (["runtime.sed=1"], "runtime.sed"),
])
def test_a_config_error_carries_its_key_path_and_the_cli_prints_the_same_line(tmp_path, opts, path):
    cfg_path = write_cfg(tmp_path / "c.yaml", tiny_cfg())
    with pytest.raises(up_trainer.ConfigError) as info:
        up_trainer.load_config(cfg_path, opts=opts)
    assert str(info.value.path).startswith(path)
    cli = invoke(["train", "--config", cfg_path, "--work-dir", tmp_path / "run", "--opts", *opts])
    assert cli.exit_code == 2
    assert cli.stderr.strip() == f"up: error: {info.value}"
    assert not (tmp_path / "run").exists()


def test_a_bad_key_in_a_mapping_is_named():
    with pytest.raises(up_trainer.ConfigError) as info:
        up_trainer.load_config(tiny_cfg(trainer={"max_epochs": 2}))
    assert info.value.path == "trainer.max_epochs" and "did you mean 'max_epoch'" in str(info.value)


def test_load_config_never_exits(tmp_path):
    """A missing file is an exception the caller catches, not SystemExit."""
    with pytest.raises(up_trainer.ConfigError) as info:
        up_trainer.load_config(tmp_path / "missing.yaml")
    assert "missing.yaml" in str(info.value)


@pytest.mark.parametrize("config", ["configs/cls/digits_resnet18.yaml", "configs/det/digits_fcos.yaml"])
def test_a_resolved_config_resolves_to_itself(config, tmp_path):
    """A run's config.yaml (the resolved config) or a Config handed back resolves to the same
    config: a resolved native config is not taken for UP's form (whose warmup defaults would
    multiply the learning rate by the batch size)."""
    import os

    from conftest import REPO

    resolved = up_trainer.load_config(os.path.join(REPO, config))
    assert dict(up_trainer.load_config(resolved)) == dict(resolved)
    again = up_trainer.load_config(yaml.safe_load(yaml.safe_dump(resolved.to_dict())))
    assert dict(again) == dict(resolved) and "origin" not in again
