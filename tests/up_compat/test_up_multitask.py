"""UP's multitask files (tests/fixtures/up/multitask, unchanged): ``up config`` passes and
``up train --dry-run`` runs with only data paths, image sizes and batch sizes changed by
--opts, on digit scenes (COCO form, the detection task) and digit images (a UP cls meta file,
the classification task)."""
import os

import pytest
import yaml

from conftest import UP_FIXTURES, invoke
from test_up_configs import BATCH, size_opts

FILES = ("multitask/r50-retina-atss-qfl.yaml", "multitask/r50-retina-atss-qfl+cls.yaml")


@pytest.fixture(scope="module")
def mt_data(tmp_path_factory):
    import test_up_configs

    return test_up_configs.up_data.__wrapped__(tmp_path_factory)


def multitask_opts(rel, data):
    """--opts for every dataset section a file holds (train, test, train_cls, test_cls)."""
    with open(os.path.join(UP_FIXTURES, rel), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    opts = []
    for name, entry in cfg["dataset"].items():
        pre = f"dataset.{name}.dataset.kwargs"
        kwargs = entry["dataset"]["kwargs"]
        evaluating = name.startswith("test")
        if entry["dataset"]["type"] == "cls":
            sub = "val" if evaluating else "train"
            opts += [f"{pre}.meta_file={data['root']}/{sub}.txt",
                     f"{pre}.image_reader.kwargs.image_dir={data['root']}/images/{sub}"]
        else:
            ann, img_dir = data["coco"]["val" if evaluating else "train"]
            opts += [f"{pre}.meta_file={ann}", f"{pre}.image_reader.kwargs.image_dir={img_dir}"]
            if "gt_file" in (kwargs.get("evaluator") or {}).get("kwargs", {}):
                opts.append(f"{pre}.evaluator.kwargs.gt_file={ann}")
        opts += size_opts(f"{pre}.transformer", kwargs.get("transformer"))
        opts.append(f"dataset.{name}.batch_sampler.kwargs.batch_size={BATCH}")
    return opts


@pytest.mark.parametrize("rel", FILES)
def test_multitask_file_passes_up_config_unchanged(rel):
    res = invoke(["config", "--config", os.path.join(UP_FIXTURES, rel)])
    assert res.exit_code == 0, res.stderr or res.exception
    resolved = yaml.safe_load(res.stdout)
    tasks = resolved["multitask"]["tasks"]
    with open(os.path.join(UP_FIXTURES, rel), encoding="utf-8") as f:
        names = yaml.safe_load(f)["multitask_cfg"]["task_names"]
    assert [t["name"] for t in tasks] == names
    assert tasks[0] == {"name": "det", "train": "train", "test": "test", "heads": ["roi_head"]}
    if len(tasks) == 2:  # the classification task's data sections moved beside the tasks
        assert tasks[1] == {"name": "cls", "train": "train_cls", "test": "test_cls", "heads": ["cls_head"]}
        test_cls = resolved["multitask"]["datasets"]["test_cls"]
        assert test_cls["evaluator"] == {"type": "imagenet", "kwargs": {"topk": [1, 5]}}
        assert test_cls["batch_size"] == 128
    else:
        assert resolved["multitask"]["datasets"] == {}


@pytest.mark.slow
@pytest.mark.parametrize("rel", FILES)
def test_multitask_file_dry_runs_with_data_opts(rel, mt_data, tmp_path):
    run_dir = tmp_path / "run"
    res = invoke(["train", "--config", os.path.join(UP_FIXTURES, rel), "--work-dir", str(run_dir), "--dry-run",
                  "--device", "cpu", "--opts", *multitask_opts(rel, mt_data)])
    assert res.exit_code == 0, res.stderr or res.exception
    assert os.listdir(run_dir) == ["train.log"]
    log = (run_dir / "train.log").read_text()
    assert "dry run: train iteration 2/2" in log and "dry run: ok" in log
    assert "det.loss_cls" in log and ("cls.loss" in log) == rel.endswith("+cls.yaml")
    assert "key.det.bbox.AP" in log and ("key.cls.top1" in log) == rel.endswith("+cls.yaml")
