"""Bad inputs through the Python API: each is one exception of the user-error family
(ConfigError with the key path, DataError, CheckpointError) with a one-line message; nothing
exits the interpreter, nothing is written, and the process is left as it was."""
import math
import os

import numpy as np
import pytest
import torch
from PIL import Image

import up_trainer
from api_helpers import changed, fast_cfg, process_state
from conftest import write_cfg
from hostile_helpers import fifo


def raises_one_line(exc_type, fn, *fragments):
    with pytest.raises(exc_type) as info:
        fn()
    text = str(info.value)
    assert "\n" not in text and len(text) < 2000, text
    for fragment in fragments:
        assert fragment in text, (fragment, text)
    return info.value


def _cycle():
    data = fast_cfg()
    data["trainer"]["again"] = data["trainer"]
    return data


def _deep():
    data = fast_cfg()
    node = data["runtime"]
    for _ in range(150):
        node["x"] = {}
        node = node["x"]
    return data


@pytest.mark.parametrize("config, path, fragment", [
    (42, None, "a config file path or a mapping"),
    (b"cfg.yaml", None, "a config file path or a mapping"),
    ([{"trainer": {}}], None, "a config file path or a mapping"),
    (fast_cfg(trainer={"max_epoch": object()}), "trainer.max_epoch", "plain values"),
    (fast_cfg(trainer={"max_epoch": torch.tensor(2)}), "trainer.max_epoch", "torch.Tensor"),
    (fast_cfg(trainer={3: 1}), "trainer", "keys must be strings"),
    (_cycle(), "trainer.again", "contains itself"),
    (_deep(), "runtime", "nested deeper"),
    (fast_cfg(trainer={"max_epoch": float("nan")}), "trainer.max_epoch", ""),
    (fast_cfg(trainer={"max_epoch": np.arange(2)}), "trainer.max_epoch", "numpy.ndarray"),  # scalars convert
    ({"_base_": 7}, "_base_", "file name"),
    ({"_base_": "/nonexistent/base.yaml"}, "_base_", "not found"),
])
def test_bad_config_mappings_are_config_errors_with_the_key_path(config, path, fragment):
    error = raises_one_line(up_trainer.ConfigError, lambda: up_trainer.load_config(config), fragment)
    assert error.path == path or str(error.path).startswith(str(path))


@pytest.mark.parametrize("opts, path", [
    ("trainer.max_epoch=2", "opts"),
    ([b"trainer.max_epoch=2"], "opts[0]"),
    ([None], "opts[0]"),
    (["trainer.max_epoch"], None),
    (["trainer.max_epoch=[1, 2"], None),
    (["=3"], None),
])
def test_bad_opts_are_config_errors(opts, path):
    error = raises_one_line(up_trainer.ConfigError, lambda: up_trainer.load_config(fast_cfg(), opts=opts))
    if path is not None:
        assert error.path == path


def test_a_config_path_that_is_a_fifo_or_a_directory(tmp_path):
    raises_one_line(up_trainer.ConfigError, lambda: up_trainer.load_config(tmp_path), str(tmp_path))
    with fifo(str(tmp_path / "cfg.yaml")) as path:
        raises_one_line(up_trainer.ConfigError, lambda: up_trainer.load_config(path), "cfg.yaml")


class NotAHook:
    def before_train(self, trainer):
        pass


@pytest.mark.parametrize("kwargs, path, fragment", [
    ({"hooks": [NotAHook()]}, "hooks[0]", "Hook instance"),
    ({"hooks": [up_trainer.Hook]}, "hooks[0]", "pass an instance"),
    ({"hooks": "train_val_logger"}, "hooks", "list of Hook instances"),
    ({"device": "gpu"}, "device", "auto, cpu, cuda"),
    ({"work_dir": 3}, "work_dir", "file path"),
    ({"work_dir": "run\0dir"}, "work_dir", "file path"),
    ({"resume": ""}, "resume", "file path"),
])
def test_bad_train_arguments_fail_before_anything_is_written(tmp_path, monkeypatch, kwargs, path, fragment):
    monkeypatch.chdir(tmp_path)
    before = process_state()
    error = raises_one_line(up_trainer.ConfigError, lambda: up_trainer.train(fast_cfg(), **kwargs), fragment)
    assert error.path == path
    assert os.listdir(tmp_path) == [] and changed(before, process_state()) == []


def test_the_same_hook_object_twice(tmp_path):
    hook = up_trainer.Hook()
    raises_one_line(up_trainer.ConfigError, lambda: up_trainer.train(fast_cfg(), work_dir=tmp_path, hooks=[hook, hook]),
                    "listed twice")


def test_resume_from_what_is_no_checkpoint(tmp_path):
    (tmp_path / "notes.pth").write_text("not a checkpoint")
    before = process_state()
    for resume in (tmp_path / "missing.pth", tmp_path / "notes.pth"):
        raises_one_line(up_trainer.CheckpointError,
                        lambda: up_trainer.train(fast_cfg(), work_dir=tmp_path / "run", resume=resume), "resume")
    assert changed(before, process_state()) == []


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    import tiny_net_plugin  # noqa: F401  (registers tiny_convnet)
    from up_trainer.tasks.net import build_model

    tmp = tmp_path_factory.mktemp("api_weights")
    cfg_path = write_cfg(tmp / "cfg.yaml", fast_cfg())
    torch.save(build_model(up_trainer.load_config(cfg_path)["net"]).state_dict(), tmp / "w.pth")
    return cfg_path, str(tmp / "w.pth"), tmp


@pytest.mark.parametrize("image, fragment", [
    (torch.zeros(2, 8, 8, dtype=torch.uint8), "1 or 3 channels"),
    (torch.zeros(1, 1, 8, 8, dtype=torch.uint8), "1 or 3 channels"),
    (torch.zeros(1, 0, 8, dtype=torch.uint8), "empty"),
    (torch.full((1, 8, 8), math.nan), "[0, 1]"),
    (torch.full((1, 8, 8), 2.0), "[0, 1]"),
    (torch.zeros(1, 8, 8, dtype=torch.int64), "uint8 or float"),
    (np.zeros((8, 8), np.uint8), "a PIL image or a tensor"),
    (None, "a PIL image or a tensor"),
    ("/nonexistent/a.png", "no such file"),
])
def test_bad_images_are_data_errors(weights, image, fragment):
    cfg_path, ckpt, _ = weights
    error = raises_one_line(up_trainer.DataError, lambda: up_trainer.predict(cfg_path, ckpt, [image]), fragment)
    assert "images[0]" in str(error) or "no such file" in str(error)


def test_image_paths_that_are_no_image_files(weights, tmp_path):
    cfg_path, ckpt, _ = weights
    raises_one_line(up_trainer.DataError, lambda: up_trainer.predict(cfg_path, ckpt, tmp_path), "directory")
    (tmp_path / "fake.png").write_bytes(b"\x89PNG not really")
    raises_one_line(up_trainer.DataError, lambda: up_trainer.predict(cfg_path, ckpt, tmp_path / "fake.png"),
                    "cannot read image")
    with fifo(str(tmp_path / "pipe.png")) as path:
        raises_one_line(up_trainer.DataError, lambda: up_trainer.predict(cfg_path, ckpt, path), "pipe.png")


def test_a_pil_image_past_the_pixel_limit(weights):
    cfg_path, ckpt, _ = weights
    big = Image.new("L", (200, 200))
    raises_one_line(up_trainer.DataError, lambda: up_trainer.predict(cfg_path, ckpt, big,
                                                                     opts=["runtime.max_image_pixels=1000"]),
                    "max_image_pixels")


@pytest.mark.parametrize("kwargs, path", [
    ({"score_thr": 1.5}, "score_thr"), ({"score_thr": True}, "score_thr"), ({"score_thr": "0.3"}, "score_thr"),
    ({"device": "tpu"}, "device"),
])
def test_bad_predict_arguments(weights, kwargs, path):
    cfg_path, ckpt, _ = weights
    error = raises_one_line(up_trainer.ConfigError,
                            lambda: up_trainer.predict(cfg_path, ckpt, torch.zeros(1, 8, 8), **kwargs))
    assert error.path == path


@pytest.mark.parametrize("checkpoint", [None, 3, "", "/nonexistent/w.pth"])
def test_bad_checkpoints_for_predict_evaluate_export(weights, checkpoint):
    cfg_path, _, tmp = weights
    expected = (up_trainer.ConfigError, up_trainer.CheckpointError)
    before = process_state()
    raises_one_line(expected, lambda: up_trainer.predict(cfg_path, checkpoint, torch.zeros(1, 8, 8)))
    raises_one_line(expected, lambda: up_trainer.evaluate(cfg_path, checkpoint, work_dir=tmp / "e"))
    raises_one_line(expected, lambda: up_trainer.export(cfg_path, checkpoint, "torchscript", tmp / "m.pt"))
    assert changed(before, process_state()) == []


def test_nothing_exits_the_interpreter(weights):
    """The CLI turns user errors into exit 2; the API never raises SystemExit."""
    cfg_path, ckpt, _ = weights
    for call in (lambda: up_trainer.load_config("/nonexistent.yaml"),
                 lambda: up_trainer.export(cfg_path, ckpt, "png"),
                 lambda: up_trainer.evaluate(fast_cfg(dataset={"test": None}), ckpt)):
        with pytest.raises(up_trainer.UserError):
            call()
