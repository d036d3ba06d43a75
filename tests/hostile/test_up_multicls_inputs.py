"""List labels (UP's multi-head classification, custom_cls ``"label": [a, b]``) that lie: a
record with another number of entries than the others, an entry that is not a class index, a
list label under a net with one classifier (or the other way round). Each stops ``up train``
before training in one line naming the file:line or the net key (exit 2)."""
import importlib.util
import json
import os

import pytest
from PIL import Image

from conftest import UP_FIXTURES, invoke
from hostile_helpers import assert_one_line

MULTICLS = os.path.join(UP_FIXTURES, "cls", "multicls", "res18.yaml")
RES18 = os.path.join(UP_FIXTURES, "cls", "resnet", "res18.yaml")


def up_cls_data(tmp_path, labels):
    (tmp_path / "img").mkdir()
    lines = []
    for i, label in enumerate(labels):
        Image.new("RGB", (12, 12), (40 * i % 255, 90, 90)).save(tmp_path / "img" / f"{i}.png")
        lines.append(json.dumps({"filename": f"{i}.png", "label": label}))
    (tmp_path / "meta.txt").write_text("\n".join(lines) + "\n")


def train(tmp_path, config):
    opts = []
    for split in ("train", "test"):
        pre = f"dataset.{split}.dataset.kwargs"
        opts += [f"{pre}.meta_file={tmp_path / 'meta.txt'}", f"{pre}.meta_type=custom_cls",
                 f"{pre}.image_reader.kwargs.image_dir={tmp_path / 'img'}"]
    return invoke(["train", "--config", config, "--work-dir", tmp_path / "run", "--device", "cpu", "--opts", *opts])


@pytest.mark.parametrize("labels, fragments", [
    ([[1, 0], [2, 1], [3]], ["meta.txt:3: 1 labels, but line 1 gives 2 (one class per classifier head"]),
    ([[1, 0], [2, "odd"]], ["meta.txt:2: label entry 1: label 'odd' is not an integer"]),
    ([[1, 0], [2, 1.5]], ["meta.txt:2: label entry 1: label must be an integer class index, got 1.5"]),
    ([[1, 0], [2, -1]], ["meta.txt:2: label entry 1: label -1 is negative"]),
    ([[1, 0], 2], ["meta.txt:2: a single label, but line 1 gives 2"]),
    ([[1, 0, 1], [2, 1, 0]], ["net[1].kwargs.num_classes: the net has 2 classifier heads but dataset.train's labels "
                              "have 3 entries"]),
])
def test_bad_list_labels_stop_the_multi_head_run(tmp_path, labels, fragments):
    up_cls_data(tmp_path, labels)
    assert_one_line(train(tmp_path, MULTICLS), *fragments)


def test_list_labels_under_one_classifier(tmp_path):
    up_cls_data(tmp_path, [[1, 0], [2, 1]])
    assert_one_line(train(tmp_path, RES18), "dataset.train has a list label per image (2 heads) but the net has one "
                    "classifier")


def test_one_label_per_image_under_two_classifiers(tmp_path):
    up_cls_data(tmp_path, [1, 2])
    assert_one_line(train(tmp_path, MULTICLS), "net[1].kwargs.num_classes: the net has 2 classifier heads but "
                    "dataset.train has one label per image")


def test_predict_and_export_refuse_a_multi_head_net_in_one_line_eval_reports_per_head(tmp_path):
    up_cls_data(tmp_path, [[1, 0], [2, 1], [3, 0], [4, 1]])
    opts = []
    for split in ("train", "test"):
        pre = f"dataset.{split}.dataset.kwargs"
        opts += [f"{pre}.meta_file={tmp_path / 'meta.txt'}", f"{pre}.image_reader.kwargs.image_dir={tmp_path / 'img'}",
                 f"{pre}.transformer.0.kwargs.size=8"]
    opts += ["dataset.test.dataset.kwargs.transformer.1.kwargs.size=8", "trainer.max_epoch=1",
             "dataset.train.dataloader.kwargs.num_workers=0", "dataset.test.dataloader.kwargs.num_workers=0",
             f"saver.save_dir={tmp_path / 'ckpt'}"]
    res = invoke(["train", "--config", MULTICLS, "--work-dir", tmp_path / "run", "--device", "cpu", "--opts", *opts])
    assert res.exit_code == 0, res.stderr
    ckpt = sorted((tmp_path / "ckpt").glob("*.pth"))[0]
    common = ["--config", MULTICLS, "--checkpoint", ckpt, "--device", "cpu", "--opts", *opts]
    res = invoke(["predict", *common[:4], "--input", tmp_path / "img", "--out", tmp_path / "pred", *common[4:]])
    assert_one_line(res, "net: up predict reads one classifier; this net has 2 heads")
    if importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxruntime"):
        res = invoke(["export", *common[:4], "--format", "onnx", "--out", tmp_path / "m.onnx", *common[6:]])
        assert_one_line(res, "net: export writes one classifier's logits and scores; this net has 2 heads")
    res = invoke(["eval", *common, "--work-dir", tmp_path / "eval"])
    assert res.exit_code == 0, res.stderr
    assert "head1.top1" in res.stdout and "avg_top1" in res.stdout, res.stdout
