"""Hostile multitask configs (the ``multitask`` section, UP's ``multitask_cfg`` and
``multitask_wrapper``): each is refused by ``up config`` in one line naming where, exit 2."""
import os

import pytest

from conftest import UP_FIXTURES, invoke
from hostile_helpers import assert_one_line, write_yaml
from test_multitask import multitask_cfg

FAKE = {"root": "/nonexistent/cls", "coco": {"train": ("/nonexistent/a.json", "/nonexistent/img"),
                                             "val": ("/nonexistent/b.json", "/nonexistent/img")}}
UP_FILE = os.path.join(UP_FIXTURES, "multitask", "r50-retina-atss-qfl+cls.yaml")


def config(tmp_path, cfg):
    return invoke(["config", "--config", write_yaml(tmp_path / "mt.yaml", cfg)])


def with_task(cfg, index, **changes):
    cfg["multitask"]["tasks"][index].update(changes)
    return cfg


def test_a_task_naming_a_data_section_that_does_not_exist(tmp_path):
    res = config(tmp_path, with_task(multitask_cfg(FAKE), 1, train="train_clss"))
    assert_one_line(res, "multitask.tasks[1].train: no data section 'train_clss'", "train_cls")


def test_a_head_index_out_of_range(tmp_path):
    res = config(tmp_path, with_task(multitask_cfg(FAKE), 1, heads=[5]))
    assert_one_line(res, "multitask.tasks[1].heads[0]: head index 5 is out of range", "roi_head, cls_head")


def test_a_head_name_the_net_does_not_have(tmp_path):
    res = config(tmp_path, with_task(multitask_cfg(FAKE), 0, heads=["roi_heads"]))
    assert_one_line(res, "multitask.tasks[0].heads[0]: the net has no head 'roi_heads'", "roi_head")


def test_a_task_with_no_evaluator_tracked_for_its_best(tmp_path):
    cfg = with_task(multitask_cfg(FAKE), 1, test=None)
    cfg["hooks"] = [{"type": "auto_save_best_multitask", "kwargs": {"tasks": ["det", "cls"]}}]
    res = config(tmp_path, cfg)
    assert_one_line(res, "hooks[0].kwargs.tasks: task 'cls' has no test data, so no evaluator")


def test_a_task_without_its_test_key(tmp_path):
    cfg = multitask_cfg(FAKE)
    del cfg["multitask"]["tasks"][1]["test"]
    assert_one_line(config(tmp_path, cfg), "multitask.tasks[1].test: required key is missing", "test: null")


def test_task_norm_statistics_for_fewer_tasks_than_the_run_has(tmp_path):
    cfg = multitask_cfg(FAKE)
    cfg["net"][0]["kwargs"]["normalize"] = {"type": "task_sync_bn", "kwargs": {"task_num": 1}}
    assert_one_line(config(tmp_path, cfg), "task_sync_bn keeps statistics for 1 task(s)", "task_num: 2")


def test_a_negative_task_index_in_a_multitask_wrapper(tmp_path):
    cfg = multitask_cfg(FAKE)
    cfg["net"][4]["wrappers"] = [{"type": "multitask_wrapper", "kwargs": {"cfg": {"idxs": [-1]}}}]
    assert_one_line(config(tmp_path, cfg), "net[4].wrappers[0].kwargs.cfg.idxs: expected task indices >= 0")


@pytest.mark.parametrize("opt, fragments", [
    ("multitask_cfg.datasets.train=[train, train_clz]",
     ("multitask_cfg.datasets.train[1]: no dataset section 'train_clz'", "train_cls")),
    ("multitask_cfg.datasets.test=[test]", ("multitask_cfg.datasets.test: 1 sections for 2 tasks",)),
    ("multitask_cfg.model_idxs={train: [0, 1]}", ("multitask_cfg.model_idxs: UP's norm index per task",)),
])
def test_up_multitask_cfg_misfits(opt, fragments):
    assert_one_line(invoke(["config", "--config", UP_FILE, "--opts", opt]), *fragments)


def test_a_task_whose_data_fills_no_batch(tmp_path):
    import test_up_configs

    class Factory:  # the module-scoped fixture's data, made here for this one case
        def mktemp(self, name):
            path = tmp_path / name
            path.mkdir()
            return path

    data = test_up_configs.up_data.__wrapped__(Factory())
    cfg = multitask_cfg(data)
    cfg["multitask"]["datasets"]["train_cls"].update(batch_size=50, drop_last=True)
    res = invoke(["train", "--config", write_yaml(tmp_path / "mt.yaml", cfg), "--work-dir", str(tmp_path / "run"),
                  "--device", "cpu"])
    assert_one_line(res, "multitask.datasets.train_cls.batch_size: 12 samples over 1 process(es) fill no batch of 50")
