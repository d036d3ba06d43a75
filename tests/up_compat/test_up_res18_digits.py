"""UP's own ``configs/cls/resnet/res18.yaml``, unchanged but for image size and epochs given
with ``--opts``, learns the digits exported as UP's ``cls`` data (a meta file of
``filename label`` lines and PNG images at the paths the file names): >= 95 % top-1.

The file's recipe is kept whole: random-resized crops down to 8 % of the area, horizontal
flips, colour jitter, label smoothing over its 1000 classes, batches of 64, SGD with nesterov
and lr 0.4, linear warmup over 2500 iterations, milestones at epochs 30/60/90, 4 loader
workers. With 23 iterations per epoch the warmup alone lasts 109 epochs (the lr climbs from
0.1 to 0.4 and top-1 hovers at 86-95 %); once it ends the milestones have all passed, the lr
drops to 0.0004 and top-1 settles above 95 %. Measured (2-core machine shared with other
work, 16 px images): 94.7 % at epoch 115, 95.5 % at 120, 96.1 % at 125, 95.5 % at 130;
a straight run of this test took 10 min 26 s (125 epochs, about 5 s each, shared 2-core
machine; the same top-1 at every evaluation as the run resumed in pieces). It is opt-in:
``UP_TRAINER_SLOW_TESTS=1 pytest tests/up_compat/test_up_res18_digits.py``.
"""
import json
import os

import numpy as np
import pytest

from conftest import REPO, invoke, UP_FIXTURES

RES18 = os.path.join(UP_FIXTURES, "cls", "resnet", "res18.yaml")
SIZE = 16
EPOCHS = 125


def export_digits_up_cls(root):
    """The digits' fixed train/test split (the ``digits`` dataset's) as UP expects it for
    res18.yaml: ``images/{train,val}/NNNN.png`` and ``images/meta/{train,val}.txt``."""
    from PIL import Image

    from up_trainer.tasks.cls.datasets import _load_digits, stratified_split

    images, labels = _load_digits()
    train, test = stratified_split(labels, 0.2, 0)
    os.makedirs(os.path.join(root, "images", "meta"))
    for split, indices in (("train", train), ("val", test)):
        os.makedirs(os.path.join(root, "images", split))
        lines = []
        for i in indices:
            name = f"{i:04d}.png"
            gray = (images[i] * 255 / 16).round().astype(np.uint8)
            Image.fromarray(gray).convert("RGB").save(os.path.join(root, "images", split, name))
            lines.append(f"{name} {labels[i]}\n")
        with open(os.path.join(root, "images", "meta", f"{split}.txt"), "w") as f:
            f.writelines(lines)
    return len(train), len(test)


@pytest.mark.skipif(os.environ.get("UP_TRAINER_SLOW_TESTS") != "1",
                    reason="about 10 minutes on 2 cores: set UP_TRAINER_SLOW_TESTS=1")
@pytest.mark.timeout(3600)  # past the suite's per-test limit: this one is opt-in and long by nature
def test_up_res18_yaml_learns_the_digits(tmp_path, monkeypatch):
    n_train, n_test = export_digits_up_cls(tmp_path)
    monkeypatch.chdir(tmp_path)  # res18.yaml names images/... relative to where it runs
    result = invoke(["train", "--config", RES18, "--opts",
                     f"dataset.train.dataset.kwargs.transformer.0.kwargs.size={SIZE}",
                     f"dataset.test.dataset.kwargs.transformer.0.kwargs.size={SIZE}",
                     f"dataset.test.dataset.kwargs.transformer.1.kwargs.size={SIZE}",
                     f"trainer.max_epoch={EPOCHS}"])
    assert result.exit_code == 0, result.stderr
    with open(tmp_path / "metrics.jsonl") as f:
        evals = [r for r in map(json.loads, f) if r.get("phase") == "eval"]
    last = evals[-1]
    assert last["epoch"] == EPOCHS and last["num_samples"] == n_test
    assert last["top1"] >= 95.0, evals


def test_export_matches_what_res18_yaml_reads(tmp_path):
    """The export itself (fast): UP's ``cls`` dataset reads it back, every image and label."""
    from up_trainer.tasks.cls.meta_dataset import ClsMetaDataset

    n_train, n_test = export_digits_up_cls(tmp_path)
    reader = {"type": "fs_pillow", "kwargs": {"image_dir": str(tmp_path / "images" / "val"), "color_mode": "RGB"}}
    ds = ClsMetaDataset(str(tmp_path / "images" / "meta" / "val.txt"), image_reader=reader)
    assert (n_train, len(ds), ds.num_classes) == (1438, n_test, 10)
    sample = ds[0]
    assert tuple(sample["image"].shape) == (3, 8, 8)
