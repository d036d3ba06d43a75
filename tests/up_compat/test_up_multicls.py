"""UP's multi-head classification: ``configs/cls/multicls/res18.yaml`` (two base_cls_head
classifiers, one label_smooth_ce each) reads custom_cls records with a list label, one class
per head, and learns the digits with head 0 = the digit and head 1 = its parity; metrics are
named per head (``head0.top1``, ``avg_top1``, ...) as UP's evaluator names them."""
import json
import os
import re

import numpy as np
import pytest
import torch

from conftest import UP_FIXTURES, invoke
from up_trainer.errors import ConfigError, DataError
from up_trainer.tasks.cls.meta_dataset import ClsMetaDataset
from up_trainer.tasks.cls.evaluator import TopKAccuracy

MULTICLS = os.path.join(UP_FIXTURES, "cls", "multicls", "res18.yaml")
SIZE = 16


def export_two_head_digits(root, n_train=None):
    """Digits as custom_cls JSON lines ``{"filename", "label": [digit, digit % 2]}``."""
    from PIL import Image

    from up_trainer.tasks.cls.datasets import _load_digits, stratified_split

    images, labels = _load_digits()
    train, test = stratified_split(labels, 0.2, 0)
    os.makedirs(os.path.join(root, "images", "meta"))
    for split, indices in (("train", train[:n_train]), ("val", test)):
        os.makedirs(os.path.join(root, "images", split))
        with open(os.path.join(root, "images", "meta", f"{split}.txt"), "w") as f:
            for i in indices:
                name = f"{i:04d}.png"
                Image.fromarray((images[i] * 255 / 16).round().astype(np.uint8)).convert("RGB").save(
                    os.path.join(root, "images", split, name))
                f.write(json.dumps({"filename": name, "label": [int(labels[i]), int(labels[i]) % 2]}) + "\n")
    return len(test)


def test_list_labels_make_per_head_class_counts(tmp_path):
    export_two_head_digits(tmp_path, n_train=40)
    ds = ClsMetaDataset(str(tmp_path / "images" / "meta" / "train.txt"), image_dir=str(tmp_path / "images" / "train"),
                        meta_type="custom_cls")
    assert ds.num_classes == [10, 2]
    sample = ds[0]
    assert sample["label"].shape == (2,) and sample["label"][1] == sample["label"][0] % 2
    batch = ds.collate_fn([ds[0], ds[1], ds[2]])
    assert tuple(batch["label"].shape) == (3, 2)


@pytest.mark.parametrize("lines, message", [
    (['{"filename": "a.png", "label": [1, 0]}', '{"filename": "b.png", "label": [1]}'],
     "meta.txt:2: 1 labels, but line 1 gives 2 (one class per classifier head"),
    (['{"filename": "a.png", "label": [1, 0]}', '{"filename": "b.png", "label": 3}'],
     "meta.txt:2: a single label, but line 1 gives 2"),
    (['{"filename": "a.png", "label": [1, "x"]}'], "meta.txt:1: label entry 1: label 'x' is not an integer"),
    (['{"filename": "a.png", "label": [1, 2.5]}'], "meta.txt:1: label entry 1: label must be an integer class index"),
    (['{"filename": "a.png", "label": []}'], "meta.txt:1: an empty label list"),
])
def test_bad_list_labels_are_named_in_one_line(tmp_path, lines, message):
    (tmp_path / "meta.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        ClsMetaDataset(str(tmp_path / "meta.txt"), image_dir=str(tmp_path), meta_type="custom_cls", check_files=False)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_per_head_topk_and_their_mean():
    ev = TopKAccuracy(topk=[1, 2])
    ev.set_heads(2)
    assert ev.primary_metric == "avg_top1"
    logits = [torch.tensor([[3.0, 2.0, 1.0], [1.0, 3.0, 2.0]]), torch.tensor([[0.0, 1.0], [1.0, 0.0]])]
    batch = {"index": torch.tensor([0, 1]), "label": torch.tensor([[1, 1], [1, 1]])}
    ev.process(batch, {"logits": logits})
    m = ev.evaluate(ev.results())
    assert (m["head0.top1"], m["head0.top2"], m["head1.top1"], m["head1.top2"]) == (50.0, 100.0, 50.0, 100.0)
    assert (m["avg_top1"], m["avg_top2"], m["num_samples"]) == (50.0, 100.0, 2)
    assert set(m) <= set(ev.metric_keys())


def test_head_counts_checked_against_the_net():
    from up_trainer.tasks.cls.multi_head import check_head_counts

    class Data:
        num_classes = [10, 2]

    check_head_counts([1000, 1000], "net[1].kwargs.num_classes", [("dataset.train", Data())])
    for predicted, message in (([1000], "the net has 1 classifier heads but dataset.train's labels have 2"),
                               ([5, 2], "head 0 predicts 5 classes but dataset.train has label 9"),
                               (10, "has a list label per image (2 heads) but the net has one classifier")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            check_head_counts(predicted, "net[1].kwargs.num_classes", [("dataset.train", Data())])


@pytest.mark.slow
def test_multicls_res18_yaml_learns_digit_and_parity(tmp_path, monkeypatch):
    """The UP file with data paths, 16 px images and a short schedule from --opts (12 epochs, no
    warmup, crops of at least 60 % of the digit): both heads well above chance."""
    n_test = export_two_head_digits(tmp_path)
    monkeypatch.chdir(tmp_path)  # the file names images/... relative to where it runs
    result = invoke(["train", "--config", MULTICLS, "--work-dir", tmp_path / "run", "--device", "cpu", "--opts",
                     f"dataset.train.dataset.kwargs.transformer.0.kwargs.size={SIZE}",
                     "dataset.train.dataset.kwargs.transformer.0.kwargs.scale=[0.6,1]",
                     f"dataset.test.dataset.kwargs.transformer.0.kwargs.size={SIZE}",
                     f"dataset.test.dataset.kwargs.transformer.1.kwargs.size={SIZE}",
                     "dataset.dataloader.kwargs.num_workers=0", "dataset.train.dataloader.kwargs.num_workers=0",
                     "dataset.test.dataloader.kwargs.num_workers=0",
                     "trainer.max_epoch=12", "trainer.test_freq=12", "trainer.lr_scheduler.warmup_iter=0",
                     "trainer.optimizer.kwargs.lr=0.05", "runtime.num_threads=1"])
    assert result.exit_code == 0, (result.stderr, result.stdout[-2000:])
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        last = [r for r in map(json.loads, f) if r.get("phase") == "eval"][-1]
    print({k: last[k] for k in ("head0.top1", "head1.top1", "avg_top1")})
    assert last["num_samples"] == n_test
    assert last["head0.top1"] > 60.0 and last["head1.top1"] > 75.0
    assert last["avg_top1"] == pytest.approx((last["head0.top1"] + last["head1.top1"]) / 2)
