"""One run's data settings never reach another's data: ``dataset.normalize_on``,
``runtime.max_image_pixels`` and the image cache travel in the run's DataContext
(data/context.py), handed to the data sets it builds, not in process globals. A data set built
after a run in the same process (a tool, a test, a notebook cell after ``up_trainer.build_trainer``)
reads and converts with the defaults, whatever the run before it chose, and the run's own data
sets keep its settings."""
import numpy as np
import pytest
import torch
from PIL import Image

from conftest import tiny_cfg
from up_trainer.errors import DataError


def image_folder(root, n=4, size=(20, 28)):
    """``n`` 28 x 20 RGB PNGs in two class folders (560 pixels each)."""
    rng = np.random.default_rng(0)
    for i in range(n):
        folder = root / f"c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return str(root)


def build_run(tmp_path, dataset, limit):
    """A run built in this process, as ``up_trainer.build_trainer`` leaves it (not started)."""
    from up_trainer import build_trainer

    cfg = tiny_cfg(runtime={"seed": 3, "device": "cpu", "max_image_pixels": limit},
                   dataset={**dataset, "normalize_on": "workers"})
    return build_trainer(cfg, work_dir=str(tmp_path / "run"), device="cpu", with_optim=False)


def test_a_data_set_built_after_a_run_does_not_inherit_its_settings(tmp_path):
    from up_trainer.engine.builder import build_dataset

    build_run(tmp_path, {}, limit=100)  # digits: nothing decoded, but the settings were the process's
    root = image_folder(tmp_path / "images")
    data = build_dataset({"type": "image_folder", "kwargs": {"root": root}}, "dataset.test")
    sample = data[0]  # 560 pixels: above the earlier run's limit, far below the default one
    assert sample["image"].dtype == torch.uint8  # converted on the device, the default; not in the workers
    assert sample["image"].shape == (3, 20, 28)


def test_the_runs_own_data_sets_keep_its_settings(tmp_path):
    root = image_folder(tmp_path / "images")
    folder = {"type": "image_folder", "kwargs": {"root": root}}
    trainer = build_run(tmp_path, {"train": folder, "test": folder}, limit=100)
    with pytest.raises(DataError, match=r"has 28 x 20 pixels, more than runtime.max_image_pixels \(100\)"):
        trainer.loaders.test_set[0]
    roomy = build_run(tmp_path, {"train": folder, "test": folder}, limit=1000)
    assert roomy.loaders.test_set[0]["image"].dtype == torch.float32  # normalize_on: workers
    with pytest.raises(DataError, match=r"\(100\)"):  # the first run's data sets still read with their own limit
        trainer.loaders.test_set[0]
