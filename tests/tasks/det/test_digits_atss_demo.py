"""The ATSS digits demo (configs/det/digits_atss.yaml) on a tiny subset, with the improve
augmentations its comment gives: it trains through ATSS / QFL / GIoU / the IoU branch,
evaluates, and the saved model predicts and counts its FLOPs, so the config cannot rot."""
import json
import os

from click.testing import CliRunner

from up_trainer.cli import main

from conftest import REPO  # noqa: E402
CONFIG = os.path.join(REPO, "configs", "det", "digits_atss.yaml")
TINY = ["dataset.train.kwargs.num_images=8", "dataset.test.kwargs.num_images=4", "dataset.batch_size=4",
        "dataset.test_batch_size=4", "trainer.max_epoch=1", "trainer.lr_scheduler.warmup_iter=1",
        "net.kwargs.score_thresh=0.0", "hooks.train_val_logger.kwargs.freq=1",
        # the improve augmentations, as the config's comment (and the README) says to turn them on
        "dataset.train.kwargs.transforms=[{type: stitch_expand, kwargs: {expand_ratios: 1.5, expand_prob: 0.3}}, "
        "{type: crop, kwargs: {means: 0, crop_prob: 0.3}}, {type: fix_output_resize, kwargs: {scales: [64, 64]}}]"]


def test_atss_demo_trains_evaluates_predicts_and_counts_flops(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["train", "--config", CONFIG, "--work-dir", str(tmp_path), "--opts", *TINY])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "stitch_expand" in (tmp_path / "config.yaml").read_text()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "loss_iou" in r]
    assert train and all(r["loss_cls"] > 0 and r["loss_loc"] > 0 for r in train)  # QFL, GIoU, IoU branch
    metrics = json.loads((tmp_path / "results_dir" / "metrics.json").read_text())
    assert 0.0 <= metrics["bbox.AP"] <= 1.0

    images = tmp_path / "images"
    res = runner.invoke(main, ["data", "digits-det", "--out", str(images), "--num-images", "2"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    val = next(p for p in images.rglob("*") if p.is_dir() and any(p.glob("*.png")))
    res = runner.invoke(main, ["predict", "--config", CONFIG, "--checkpoint",
                               str(tmp_path / "checkpoints" / "ckpt_best.pth"), "--input", str(val),
                               "--out", str(tmp_path / "pred"), "--score-thr", "0.0"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    predictions = [json.loads(line) for line in (tmp_path / "pred" / "predictions.jsonl").read_text().splitlines()]
    assert predictions and all(p["boxes"] for p in predictions)

    res = runner.invoke(main, ["flops", "--config", CONFIG])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "roi_head" in res.output and "total" in res.output
