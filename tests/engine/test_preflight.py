"""`up config` checks everything `up train` would build without reading data; `up train
--dry-run` builds it, runs 2 iterations and 2 evaluation batches and writes only the log."""
import os

import pytest

from conftest import tiny_cfg, write_cfg

META_CLS = {"type": "cls", "kwargs": {"meta_file": "/nonexistent/meta.txt", "image_reader": {
    "type": "fs_pillow", "kwargs": {"image_dir": "/nonexistent", "color_mode": "RGB"}},
    "transformer": [{"type": "torch_resize", "kwargs": {"size": 8}}, {"type": "to_tensor"}]}}


def test_config_reads_no_data(tmp_path, run_up):
    cfg = tiny_cfg(dataset={"train": META_CLS, "test": None})
    res = run_up(["config", "--config", write_cfg(tmp_path / "a.yaml", cfg)])
    assert res.exit_code == 0, res.stderr


@pytest.mark.parametrize("sections,match", [
    ({"hooks": [{"type": "auto_sav_best"}]}, r"hooks\[0\].type: unknown hook type 'auto_sav_best'"),
    ({"net": {"type": "resnet181", "kwargs": {}}}, r"net.type: unknown model type 'resnet181'"),
    ({"net": {"type": "resnet18", "kwargs": {"num_clases": 3}}}, r"net.kwargs.num_clases: unknown argument"),
    ({"dataset": {"train": {"type": "digitz"}}}, r"dataset.train.type: unknown dataset type 'digitz'"),
    ({"dataset": {"train": {"type": "digits", "kwargs": {"splt": "train"}}}}, r"dataset.train.kwargs.splt"),
    ({"dataset": {"train": {**META_CLS, "kwargs": {**META_CLS["kwargs"], "transformer": [
        {"type": "torch_resize", "kwargs": {"sise": 8}}]}}}}, r"dataset.train.kwargs.transforms\[0\].kwargs.sise"),
    ({"dataset": {"train": {**META_CLS, "kwargs": {**META_CLS["kwargs"], "image_reader": {
        "type": "fs_pillow", "kwargs": {"color_mode": "BGR"}}}}}}, r"image_reader.kwargs.color_mode: 'BGR'"),
    ({"dataset": {"test": {"type": "digits", "kwargs": {"evaluator": {"type": "imagenett"}}}}},
     r"dataset.evaluator.type: unknown evaluator type"),  # moved out of kwargs by the translation
    ({"dataset": {"batch_fn": {"type": "batch_mixup", "kwargs": {"alpha": -1}}}}, r"dataset.batch_fn.kwargs.alpha"),
    ({"trainer": {"max_epoch": 1, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.1, "momentun": 0.9}}}},
     r"trainer.optimizer.kwargs.momentun: unknown argument"),
    ({"trainer": {"max_epoch": 1, "lr_scheduler": {"type": "StepLRR"}}}, r"trainer.lr_scheduler.type: unknown"),
])
def test_config_rejects_what_train_would(tmp_path, run_up, sections, match):
    res = run_up(["config", "--config", write_cfg(tmp_path / "a.yaml", tiny_cfg(**sections))])
    assert res.exit_code == 2, (res.stdout, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and __import__("re").search(match, lines[0]), lines


def test_dry_run_writes_only_the_log(tmp_path, run_up):
    cfg = tiny_cfg(trainer={"max_epoch": 3}, saver={"save_dir": "checkpoints", "pretrain_model": "missing.pth"})
    path = write_cfg(tmp_path / "a.yaml", cfg)
    run_dir = tmp_path / "run"
    res = run_up(["train", "--config", path, "--work-dir", run_dir, "--dry-run"])
    assert res.exit_code == 0, (res.stderr, res.exception)
    files = sorted(os.path.relpath(os.path.join(d, f), run_dir) for d, _, fs in os.walk(run_dir) for f in fs)
    assert files == ["train.log"]
    log = (run_dir / "train.log").read_text()
    for line in ("precision: float32", "dry run: train iteration 2/2", "dry run: evaluated 1 batch(es), metrics on them: {'top1'",
                 "saver.pretrain_model missing.pth (NOT FOUND) is not loaded; a real run stops here", "dry run: ok",
                 "optimizer param groups"):
        assert line in log, (line, log)


def test_dry_run_evaluate_only_and_missing_resume(tmp_path, run_up):
    path = write_cfg(tmp_path / "a.yaml", tiny_cfg())
    res = run_up(["train", "--config", path, "--work-dir", tmp_path / "r", "--dry-run", "-e", "--resume", "no.pth"])
    assert res.exit_code == 2 and "--resume: checkpoint not found: no.pth" in res.stderr
    res = run_up(["train", "--config", path, "--work-dir", tmp_path / "r", "--dry-run", "-e"])
    assert res.exit_code == 0, res.stderr
    log = (tmp_path / "r" / "train.log").read_text()
    assert "dry run: 0 training iterations" in log and "dry run: evaluated 1 batch(es)" in log
