"""Evaluation insight: exact counts on hand-made records, and the pictures the digits demos
produce checked as images (size, not blank), in results_dir and in TensorBoard."""
import csv
import json

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import REPO
from up_trainer.tasks.cls.insight import confusion_matrix, precision_recall
from up_trainer.tasks.det.insight import confusion_with_background


def _image(path, min_side=200):
    pixels = np.asarray(Image.open(path).convert("RGB"))
    assert min(pixels.shape[:2]) >= min_side, pixels.shape
    assert pixels.std() > 10 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20  # not blank
    return pixels


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _tb_tags(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    return acc


def test_classification_confusion_and_precision_recall_exact():
    records = [{"label": 0, "pred": 0}, {"label": 0, "pred": 1}, {"label": 1, "pred": 1}, {"label": 2, "pred": 1}]
    m = confusion_matrix(records, 3)
    assert m == [[1, 1, 0], [0, 1, 0], [0, 1, 0]]
    (p0, r0, s0, _), (p1, r1, _, n1), (p2, r2, _, n2) = precision_recall(m)
    assert (p0, r0, s0) == (1.0, 0.5, 2) and (p1, r1, n1) == (pytest.approx(1 / 3), 1.0, 3) and (p2, r2, n2) == (0, 0, 0)


def test_detection_confusion_has_background_row_and_column():
    rec = {"gt_boxes": [[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50]], "gt_labels": [1, 2, 2],
           "boxes": [[0, 0, 10, 10], [20, 20, 30, 31], [60, 60, 70, 70], [0, 0, 10, 9], [40, 40, 50, 50]],
           "scores": [0.9, 0.8, 0.7, 0.6, 0.1], "labels": [1, 1, 2, 1, 2], "ignore_boxes": []}
    m = confusion_with_background([rec], 2, score_thr=0.3)
    # box 1 -> object 1 (right); box 2 -> object 2 with the wrong class; box 3 matches nothing;
    # box 4 overlaps object 1, already taken: background; box 5 is under the score threshold.
    assert m[0] == [1, 0, 0] and m[1] == [1, 0, 1] and m[2] == [1, 1, 0]
    rec["ignore_boxes"] = [[55, 55, 80, 80]]  # box 3 inside an ignore region: not counted
    assert confusion_with_background([rec], 2, score_thr=0.3)[2] == [1, 0, 0]


@pytest.fixture(scope="module")
def cls_run(tmp_path_factory):
    from click.testing import CliRunner

    from up_trainer.cli import main

    tmp = tmp_path_factory.mktemp("cls")
    res = CliRunner().invoke(main, ["train", "--config", f"{REPO}/configs/cls/digits_resnet18.yaml",
                                    "--work-dir", str(tmp), "--opts", "trainer.max_epoch=1",
                                    "dataset.train.kwargs.subset=128", "dataset.test.kwargs.subset=64",
                                    "trainer.lr_scheduler.kwargs.T_max=1"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return tmp


def test_classification_demo_writes_insight(cls_run):
    out = cls_run / "results_dir"
    _image(out / "confusion_matrix.png")
    sheet = _image(out / "confidently_wrong.png", min_side=90)
    matrix = _rows(out / "confusion_matrix.csv")
    assert matrix[0][1:] == [str(i) for i in range(10)] and sum(int(v) for r in matrix[1:] for v in r[1:]) == 64
    per_class = _rows(out / "per_class.csv")
    assert per_class[0] == ["class", "precision", "recall", "support", "predicted"] and len(per_class) == 11
    assert all(0.0 <= float(r[1]) <= 1.0 and 0.0 <= float(r[2]) <= 1.0 for r in per_class[1:])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["val_loss"] > 0 and sheet.shape[1] > sheet.shape[0]
    acc = _tb_tags(cls_run / "log")
    assert {"insight/confusion_matrix", "insight/confidently_wrong"} <= set(acc.Tags()["images"])
    assert "metrics/val_loss" in acc.Tags()["scalars"] and "insight/recall/0" in acc.Tags()["scalars"]


@pytest.fixture(scope="module")
def det_run(tmp_path_factory):
    from click.testing import CliRunner

    from up_trainer.cli import main

    tmp = tmp_path_factory.mktemp("det")
    res = CliRunner().invoke(main, ["train", "--config", f"{REPO}/configs/det/digits_fcos.yaml",
                                    "--work-dir", str(tmp), "--opts", "trainer.max_epoch=1",
                                    "dataset.train.kwargs.num_images=4", "dataset.test.kwargs.num_images=6",
                                    "dataset.batch_size=2", "trainer.lr_scheduler.warmup_iter=1",
                                    "net.kwargs.score_thresh=0.0", "hooks.eval_insight.kwargs.score_thr=0.0"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return tmp


def test_detection_demo_writes_insight(det_run):
    out = det_run / "results_dir"
    for name in ("pr_curves.png", "confusion_matrix.png", "ap_by_size.png"):
        _image(out / name)
    matrix = _rows(out / "confusion_matrix.csv")
    assert matrix[0][-1] == "background" and matrix[-1][0] == "background" and len(matrix) == 12
    truth = json.loads((det_run / "results_dir" / "results.jsonl").read_text().splitlines()[0])
    assert truth["boxes"]  # score_thresh 0: the untrained model detects something
    by_size = _rows(out / "ap_by_size.csv")
    assert by_size[0] == ["class", "all", "small", "medium", "large"] and len(by_size) == 11
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["val_loss"] > 0
    acc = _tb_tags(det_run / "log")
    assert {"insight/pr_curves", "insight/confusion_matrix", "insight/ap_by_size"} <= set(acc.Tags()["images"])
    assert "metrics/val_loss" in acc.Tags()["scalars"]


def test_eval_loss_pass_gives_the_same_detections():
    from up_trainer.registry import MODELS

    torch.manual_seed(0)
    m = MODELS.build({"type": "retinanet", "kwargs": {"num_classes": 3, "backbone": "resnet18", "min_size": 64,
                                                      "max_size": 64, "fpn_channels": 32, "returned_layers": [2, 3],
                                                      "fpn_extra": "none", "score_thresh": 0.0}}).eval()
    images = [torch.rand(3, 64, 64), torch.rand(3, 48, 64)]
    targets = [{"boxes": torch.tensor([[4.0, 4, 30, 30]]), "labels": torch.tensor([1])},
               {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64)}]
    with torch.no_grad():
        plain = m({"image": images})
        both = m({"image": images, "target": targets})
    assert set(both) == {"detections", "loss_classification", "loss_bbox_regression"}
    assert float(both["loss_classification"]) > 0
    for a, b in zip(plain["detections"], both["detections"]):
        assert torch.equal(a["boxes"], b["boxes"]) and torch.equal(a["scores"], b["scores"])


def test_insight_leaves_the_random_streams_as_they_were(tmp_path):
    """Reading test images for the contact sheet may draw random transforms; training after an
    evaluation must not see a different random stream (exact resume)."""
    from types import SimpleNamespace

    from up_trainer.hooks.eval_insight import write_insight
    from up_trainer.tasks.cls.evaluator import TopKAccuracy

    class RandomImages:
        classes = ["a", "b"]

        def __getitem__(self, i):
            return {"image": torch.rand(1, 8, 8)}

    ev = TopKAccuracy(topk=[1])
    ev.process({"index": torch.arange(4), "label": torch.tensor([0, 1, 0, 1])}, {"logits": torch.tensor([[0.0, 1], [1, 0], [1, 0], [0, 1]])})  # 2 wrong
    trainer = SimpleNamespace(evaluator=ev, results_dir=str(tmp_path), loaders=SimpleNamespace(test_set=RandomImages()))
    torch.manual_seed(1)
    insight = write_insight(trainer, ev.results())
    assert "insight/confidently_wrong" in insight.images  # the images were read
    after = torch.rand(3)
    torch.manual_seed(1)
    assert torch.equal(after, torch.rand(3))


def test_a_thousand_class_confusion_figure_stays_small(tmp_path):
    """ImageNet-sized label sets: the figure is capped (it once asked for 45,000 px a side)."""
    from up_trainer.tasks.cls.insight import write_insight

    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 1000, (3000,), generator=gen).tolist()
    preds = torch.randint(0, 1000, (3000,), generator=gen).tolist()
    records = [{"index": i, "label": y, "pred": p, "score": 0.5} for i, (y, p) in enumerate(zip(labels, preds))]
    insight = write_insight(records, str(tmp_path), dataset=None)
    image = insight.images["insight/confusion_matrix"]
    assert image.shape[0] == 3 and max(image.shape[1:]) <= 2600, image.shape
    assert len(_rows(tmp_path / "per_class.csv")) == 1001


def test_writers_started_in_the_same_second_keep_their_own_files(tmp_path, monkeypatch):
    """tensorboardX names event files by the second and opens them 'wb': the logger's and the
    insight hook's writers, started in one second (a short run), once shared a file and lost
    each other's records, depending on the clock."""
    import types

    import tensorboardX.event_file_writer as efw
    from click.testing import CliRunner

    from up_trainer.cli import main

    monkeypatch.setattr(efw, "time", types.SimpleNamespace(time=lambda: 1700000000.0))  # one second for all
    res = CliRunner().invoke(main, ["train", "--config", f"{REPO}/configs/cls/digits_resnet18.yaml",
                                    "--work-dir", str(tmp_path), "--opts", "trainer.max_epoch=1",
                                    "dataset.train.kwargs.subset=64", "dataset.test.kwargs.subset=32",
                                    "trainer.lr_scheduler.kwargs.T_max=1"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    acc = _tb_tags(tmp_path / "log")
    assert {"insight/confusion_matrix", "insight/confidently_wrong"} <= set(acc.Tags()["images"])
    assert {"metrics/val_loss", "metrics/top1", "insight/recall/0"} <= set(acc.Tags()["scalars"])
