"""The YOLOX digits demo (configs/det/digits_yolox.yaml) as shipped, on a tiny subset and two
epochs with the no-augmentation switch before the second: it trains through SimOTA and the
YOLOX losses, switches its pipeline and turns the L1 loss on, evaluates with the EMA weights,
and the saved model predicts and counts its FLOPs, so the config cannot rot."""
import json
import os

from click.testing import CliRunner

from up_trainer.cli import main

from conftest import REPO  # noqa: E402
CONFIG = os.path.join(REPO, "configs", "det", "digits_yolox.yaml")
TINY = ["dataset.train.kwargs.num_images=8", "dataset.test.kwargs.num_images=4", "dataset.batch_size=4",
        "dataset.test_batch_size=4", "trainer.max_epoch=2", "trainer.lr_scheduler.kwargs.no_aug_epoch=1",
        "hooks.yolox_noaug.kwargs.max_epoch=2", "hooks.yolox_noaug.kwargs.no_aug_epoch=1",
        "net.kwargs.width=0.125", "net.kwargs.score_thresh=0.0"]


def test_yolox_demo_trains_switches_evaluates_predicts_and_counts_flops(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["train", "--config", CONFIG, "--work-dir", str(tmp_path), "--opts", *TINY,
                               "hooks.train_val_logger.kwargs.freq=1"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "loss_iou" in r and "epoch" in r]
    assert {r["epoch"] for r in train} == {1, 2}
    assert all(("loss_l1" in r) == (r["epoch"] == 2) for r in train)  # the L1 loss from the switch on
    metrics = json.loads((tmp_path / "results_dir" / "metrics.json").read_text())
    assert 0.0 <= metrics["bbox.AP"] <= 1.0

    images = tmp_path / "images"
    res = runner.invoke(main, ["data", "digits-det", "--out", str(images), "--num-images", "2"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    val = next(p for p in images.rglob("*") if p.is_dir() and any(p.glob("*.png")))
    res = runner.invoke(main, ["predict", "--config", CONFIG, "--checkpoint",
                               str(tmp_path / "checkpoints" / "ckpt_best.pth"), "--input", str(val),
                               "--out", str(tmp_path / "pred"), "--score-thr", "0.0", "--opts", *TINY])
    assert res.exit_code == 0, res.output + repr(res.exception)
    predictions = [json.loads(line) for line in (tmp_path / "pred" / "predictions.jsonl").read_text().splitlines()]
    assert predictions and all(p["boxes"] for p in predictions)

    res = runner.invoke(main, ["flops", "--config", CONFIG])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "roi_head" in res.output and "898.51K" in res.output  # YOLOX-nano at 10 classes
