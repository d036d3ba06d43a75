"""UP's two classification distiller files train (``up train --dry-run``: two iterations and
two evaluation batches) with only data paths, image size, batch size and the teacher's weight
file changed by --opts: a resnet152 teacher beside the resnet18 student, kl_loss on the logits."""
import os

import numpy as np
import pytest

from conftest import UP_FIXTURES, invoke

FILES = [os.path.join(UP_FIXTURES, "distiller", "cls", n) for n in ("res18_kd.yaml", "res18_kd_bag_of_tricks.yaml")]


def write_up_cls_images(root, per_split=8):
    """A few digits as UP's cls data where the files name it: images/{train,val}/*.png and
    images/meta/{train,val}.txt of ``filename label`` lines."""
    from PIL import Image

    from up_trainer.tasks.cls.datasets import _load_digits

    images, labels = _load_digits()
    os.makedirs(os.path.join(root, "images", "meta"))
    for split, start in (("train", 0), ("val", per_split)):
        os.makedirs(os.path.join(root, "images", split))
        with open(os.path.join(root, "images", "meta", f"{split}.txt"), "w") as meta:
            for i in range(start, start + per_split):
                gray = (images[i] * 255 / 16).round().astype(np.uint8)
                Image.fromarray(gray).convert("RGB").save(os.path.join(root, "images", split, f"{i}.png"))
                meta.write(f"{i}.png {labels[i]}\n")


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_ups_cls_distiller_file_dry_runs(tmp_path, monkeypatch, path):
    write_up_cls_images(tmp_path)
    monkeypatch.chdir(tmp_path)  # the files name images/... relative to where they run
    res = invoke(["train", "--config", path, "--dry-run", "--work-dir", tmp_path / "run", "--opts",
                  "dataset.train.dataset.kwargs.transformer.0.kwargs.size=16",
                  "dataset.test.dataset.kwargs.transformer.0.kwargs.size=16",
                  "dataset.test.dataset.kwargs.transformer.1.kwargs.size=16",
                  "dataset.train.batch_sampler.kwargs.batch_size=4",
                  "dataset.test.batch_sampler.kwargs.batch_size=4",
                  "mimic.teacher.teacher_weight=null"])
    assert res.exit_code == 0, (res.stderr, res.exception, res.stdout[-2000:])
    assert "distill: 1 teacher(s) (teacher), frozen; mimic_job0: kl_loss on head.classifier" in res.stdout
    assert "no teacher weight given" in res.stdout
    assert "mimic.mimic_job0.teacher.loss" in res.stdout
