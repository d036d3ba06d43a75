"""A first run, as a new user makes it: the same command typed again after a finished or
interrupted run, a resume from another directory, a recipe switched to another data format
with --opts, and a data folder that is not what `up train --data` can read."""
import json
import os
import shutil

import pytest

from conftest import REPO, invoke
from hostile_helpers import assert_one_line, fingerprint, tiny_cfg, write_yaml


@pytest.fixture
def finished(tmp_path):
    """A finished one-epoch run in tmp_path/run: (config path, run dir)."""
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    run = tmp_path / "run"
    result = invoke(["train", "--config", cfg, "--work-dir", run])
    assert result.exit_code == 0, (result.stderr, result.exception)
    return cfg, run


def test_the_same_line_again_is_refused_with_both_ways_on(finished):
    cfg, run = finished
    before, log = fingerprint(run / "checkpoints"), (run / "train.log").read_text()
    line = assert_one_line(invoke(["train", "--config", cfg, "--work-dir", run]),
                           f"{run / 'checkpoints'} holds the checkpoints of a run already")
    latest = run / "checkpoints" / "ckpt_latest.pth"
    assert f"--work-dir {run} --resume {latest}`" in line and f"--work-dir {run} --fresh`" in line, line
    assert fingerprint(run / "checkpoints") == before and (run / "train.log").read_text() == log


def test_fresh_moves_the_old_run_aside_then_starts_over(finished):
    cfg, run = finished
    before = fingerprint(run / "checkpoints")
    result = invoke(["train", "--config", cfg, "--work-dir", run, "--fresh"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    moved = [d for d in os.listdir(run) if d.startswith("replaced-")]
    assert len(moved) == 1, os.listdir(run)
    assert fingerprint(run / moved[0] / "checkpoints") == before  # the old run, whole
    assert (run / moved[0] / "train.log").is_file() and (run / moved[0] / "config.yaml").is_file()
    assert (run / "checkpoints" / "ckpt_e1.pth").is_file()


def test_resume_without_work_dir_continues_in_the_checkpoints_run_dir(finished, tmp_path, monkeypatch):
    _, run = finished
    longer = write_yaml(tmp_path / "longer.yaml", tiny_cfg(trainer={"max_epoch": 2}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = invoke(["train", "--config", longer, "--resume", run / "checkpoints" / "ckpt_latest.pth"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert (run / "checkpoints" / "ckpt_e2.pth").is_file()
    assert os.listdir(elsewhere) == []  # no second half of the history here


def test_fresh_and_resume_together_are_refused(finished):
    cfg, run = finished
    assert_one_line(invoke(["train", "--config", cfg, "--work-dir", run, "--fresh", "--resume",
                            run / "checkpoints" / "ckpt_latest.pth"]), "give one of them")


def test_a_kwarg_left_from_the_former_type_is_named_as_such(tmp_path):
    (tmp_path / "voc" / "Annotations").mkdir(parents=True)
    recipe = os.path.join(REPO, "configs", "det", "small_data_atss.yaml")
    line = assert_one_line(invoke(["config", "--config", recipe, "--opts", "dataset.train.type=voc",
                                   f"dataset.train.kwargs.root={tmp_path / 'voc'}"]),
                           "dataset.train.kwargs.ann_file: voc takes no 'ann_file': that is an argument of coco",
                           "left over from the type this entry had before", "remove it, or replace it")
    assert "did you mean" not in line


def test_a_folder_of_two_formats_asks_for_format(tmp_path):
    data = tmp_path / "data"
    (data / "Annotations").mkdir(parents=True)
    (data / "a.json").write_text('{"shapes": [], "imagePath": "a.png"}')
    assert_one_line(invoke(["train", "--data", data, "--work-dir", tmp_path / "run"]),
                    f"--data {data}: looks like voc and labelme; give --format voc|labelme")
    assert not (tmp_path / "run").exists()


def test_a_folder_of_no_known_format_is_one_line(tmp_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "a.txt").write_text("hello")
    assert_one_line(invoke(["train", "--data", tmp_path / "photos", "--work-dir", tmp_path / "run"]),
                    "no detection data set recognised")


def test_an_unknown_recipe_or_a_wrong_format_is_one_line(tmp_path):
    voc = tmp_path / "voc"
    (voc / "Annotations").mkdir(parents=True)
    assert_one_line(invoke(["train", "--data", voc, "--model", "nope", "--work-dir", tmp_path / "run"]),
                    "--model: no recipe 'nope' (recipes: ", "atss")
    assert_one_line(invoke(["train", "--data", voc, "--format", "yolo", "--work-dir", tmp_path / "run"]),
                    f"--data {voc}: --format yolo needs a data.yaml")
    assert not (tmp_path / "run").exists()


def test_one_line_flags_without_data_are_one_line(finished):
    cfg, run = finished
    assert_one_line(invoke(["train", "--config", cfg, "--epochs", "3", "--work-dir", run]),
                    "--epochs go with --data DIR")


def test_a_directory_that_is_no_run_for_eval_is_one_line(tmp_path):
    shutil.rmtree(tmp_path, ignore_errors=True)
    tmp_path.mkdir()
    assert_one_line(invoke(["eval", "--config", tmp_path]), f"{tmp_path}: not a run directory")


def test_data_check_measures_boxes_at_the_size_the_transforms_make(tmp_path):
    """The recipe resizes in its pipeline (keep_ar_resize_max), not in the net: boxes of
    10-18 px in 48-px files are 3-6 px at a long side of 16, under the finest stride."""
    from format_fixtures import det_cfg, digits_coco

    (coco, img_dir, ann), = digits_coco(str(tmp_path / "src"), num_images=6, num_val_images=0).values()
    resize = [{"type": "keep_ar_resize_max", "kwargs": {"max_size": 16}}]
    cfg = det_cfg({"type": "coco", "kwargs": {"ann_file": ann, "img_dir": img_dir, "transforms": resize}})
    for key in ("min_size", "max_size"):  # the net resizes nothing itself
        del cfg["net"]["kwargs"][key]
    result = invoke(["data", "check", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--out", tmp_path / "out"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "box sizes at the training input size (long side 16)" in result.stdout, result.stdout
    boxes = len(coco["annotations"])
    assert f"warning: [train] small boxes: {boxes} of {boxes} box(es) are under 8 px" in result.stdout, result.stdout
    assert json.loads((tmp_path / "out" / "report.json").read_text())["input_size"] == "long side 16"
