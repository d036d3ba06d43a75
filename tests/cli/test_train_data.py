"""`up train --data DIR`: a detector on a labelled folder with no YAML, the class count from the
data, the config written where the next run can start from it, the run dir given to the
commands that use a finished run, and the one line that ends a run."""
import json
import os

import pytest
import yaml

from conftest import invoke
from format_fixtures import digits_coco, write_labelme, write_voc
from hostile_helpers import tiny_cfg, write_yaml

FAST = ["--epochs", "1", "--imgsz", "64", "--batch", "4"]


@pytest.fixture(scope="module")
def voc_root(tmp_path_factory):
    """A VOC root (Annotations/, JPEGImages/, ImageSets/Main/train.txt + val.txt) of 48-px
    digit scenes: 8 train and 4 val images."""
    base = tmp_path_factory.mktemp("voc")
    for split, (coco, img_dir, _) in digits_coco(str(base / "src"), num_images=8, num_val_images=4).items():
        write_voc(coco, img_dir, str(base / "voc"), split)
    return base / "voc"


def data_classes(voc_root):
    """The class names the VOC files hold (what the net must predict)."""
    names = set()
    for name in os.listdir(voc_root / "Annotations"):
        text = (voc_root / "Annotations" / name).read_text()
        names.update(part.split("</name>")[0] for part in text.split("<name>")[1:])
    return sorted(names)


@pytest.fixture(scope="module")
def oneline_run(voc_root, tmp_path_factory):
    """One finished `up train --data <voc root>` run: (result, run dir)."""
    run = tmp_path_factory.mktemp("oneline") / "run"
    result = invoke(["train", "--data", voc_root, *FAST, "--work-dir", run])
    assert result.exit_code == 0, (result.stdout[-3000:], result.stderr[-3000:], result.exception)
    return result, run


def test_voc_root_trains_with_the_class_count_of_the_data(oneline_run, voc_root):
    result, run = oneline_run
    classes = data_classes(voc_root)
    built = yaml.safe_load((run / "train.yaml").read_text())
    assert built["net"]["type"] == "atss"  # the recommended recipe by default
    assert built["net"]["kwargs"]["num_classes"] == len(classes)
    assert built["dataset"]["train"]["type"] == "voc" and built["dataset"]["train"]["kwargs"]["split"] == "train"
    assert built["dataset"]["test"]["kwargs"]["split"] == "val"  # the layout's own split
    assert built["dataset"]["train"]["kwargs"]["classes"] == classes
    assert built["trainer"]["max_epoch"] == 1 and built["dataset"]["batch_size"] == 4
    resizes = [t["kwargs"]["max_size"] for split in ("train", "test")
               for t in built["dataset"][split]["kwargs"]["transforms"] if t["type"] == "keep_ar_resize_max"]
    assert resizes == [64, 64]
    assert "ann_file" not in built["dataset"]["train"]["kwargs"]  # nothing of the recipe's COCO example
    # the command that reruns it from YAML is printed, and config.yaml records the same count
    assert f"up train --config {run / 'train.yaml'} --work-dir {run}" in result.stdout
    assert yaml.safe_load((run / "config.yaml").read_text())["net"]["kwargs"]["num_classes"] == len(classes)
    assert (run / "checkpoints" / "ckpt_e1.pth").is_file()


def test_the_run_ends_with_one_summary_line(oneline_run):
    _, run = oneline_run
    lines = [line for line in (run / "train.log").read_text().splitlines() if "run finished:" in line]
    assert len(lines) == 1, lines
    metrics = json.loads((run / "results_dir" / "metrics.json").read_text())
    line = lines[0]
    assert f"best bbox.AP {metrics['bbox.AP']:.4f} at epoch 1" in line, line
    assert f"checkpoint {run / 'checkpoints' / 'ckpt_best.pth'}" in line, line
    assert " time 0m" in line and f"plots {run / 'results.png'}" in line, line
    assert (run / "results.png").is_file()


def test_predict_eval_and_export_take_the_run_dir(oneline_run, voc_root, tmp_path):
    _, run = oneline_run
    out = tmp_path / "pred"
    result = invoke(["predict", "--config", run, "--input", voc_root / "JPEGImages", "--out", out])
    assert result.exit_code == 0, (result.stderr[-2000:], result.exception)
    assert len((out / "predictions.jsonl").read_text().splitlines()) == len(os.listdir(voc_root / "JPEGImages"))
    result = invoke(["eval", "--checkpoint", run / "checkpoints" / "ckpt_e1.pth", "--work-dir", tmp_path / "ev"])
    assert result.exit_code == 0, (result.stderr[-2000:], result.exception)  # the config of the checkpoint's run
    assert (tmp_path / "ev" / "results_dir" / "metrics.json").is_file()
    result = invoke(["eval", "--config", tmp_path])
    assert result.exit_code == 2 and "not a run directory" in result.stderr


def test_one_split_folder_gets_a_seeded_split_written_down(tmp_path):
    (coco, img_dir, _), = digits_coco(str(tmp_path / "src"), num_images=10, num_val_images=0).values()
    folder = write_labelme(coco, img_dir, str(tmp_path / "labelme"))
    run = tmp_path / "run"
    result = invoke(["train", "--data", folder, *FAST, "--work-dir", run])
    assert result.exit_code == 0, (result.stdout[-3000:], result.stderr[-3000:], result.exception)
    split = json.loads((run / "split.json").read_text())
    images = sorted(f for f in os.listdir(folder) if f.endswith(".png"))
    assert sorted(split["train"] + split["val"]) == images and not set(split["train"]) & set(split["val"])
    assert len(split["val"]) == 2 and split["seed"] == 0
    built = yaml.safe_load((run / "train.yaml").read_text())
    assert built["dataset"]["test"]["kwargs"]["part"] == "val"
    assert built["net"]["kwargs"]["num_classes"] == len({a["category_id"] for a in coco["annotations"]})


def test_a_yaml_without_num_classes_takes_the_count_from_the_data(voc_root, tmp_path):
    from format_fixtures import det_cfg

    cfg = det_cfg({"type": "voc", "kwargs": {"root": str(voc_root), "split": "train", "classes": ["1", "2", "3"],
                                             "on_bad_record": "skip"}})
    del cfg["net"]["kwargs"]["num_classes"]
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    result = invoke(["train", "--config", path, "--work-dir", tmp_path / "run"])
    assert result.exit_code == 0, (result.stderr[-3000:], result.exception)
    resolved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert resolved["net"]["kwargs"]["num_classes"] == 3


def test_auto_resume_in_a_run_dir_is_a_resume_not_refused(tmp_path):
    run = tmp_path / "run"
    first = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", tiny_cfg()), "--work-dir", run])
    assert first.exit_code == 0, (first.stderr, first.exception)
    longer = write_yaml(tmp_path / "auto.yaml", tiny_cfg(trainer={"max_epoch": 2},
                                                         saver={"save_dir": "checkpoints", "auto_resume": True}))
    result = invoke(["train", "--config", longer, "--work-dir", run])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert (run / "checkpoints" / "ckpt_e2.pth").is_file()


def test_dry_run_of_a_seeded_split_writes_nothing_but_its_log(tmp_path):
    (coco, img_dir, _), = digits_coco(str(tmp_path / "src"), num_images=10, num_val_images=0).values()
    folder = write_labelme(coco, img_dir, str(tmp_path / "labelme"))  # 8 train images: 2 batches of 4
    result = invoke(["train", "--data", folder, *FAST, "--work-dir", tmp_path / "run", "--dry-run"])
    assert result.exit_code == 0, (result.stdout[-3000:], result.stderr[-3000:], result.exception)
    assert os.listdir(tmp_path / "run") == ["train.log"]


def test_resuming_a_finished_run_names_its_metric_in_the_summary(oneline_run, voc_root, tmp_path):
    """The refusal's "continue it" command on a run that has finished: nothing to train, and
    the summary still names the metric its best is of (the key is never resolved then)."""
    import shutil

    _, run = oneline_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    result = invoke(["train", "--data", voc_root, *FAST, "--work-dir", copy,
                     "--resume", copy / "checkpoints" / "ckpt_latest.pth"])
    assert result.exit_code == 0, (result.stdout[-3000:], result.stderr[-3000:], result.exception)
    line = [s for s in (copy / "train.log").read_text().splitlines() if "run finished:" in s][-1]
    assert "best bbox.AP " in line and "best None" not in line, line
