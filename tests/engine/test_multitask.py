"""A multitask run (the ``multitask`` section) on digit scenes (detection, COCO form) and digit
images (classification, a UP cls meta file): one net, both tasks' losses in every step, each
task evaluated on its own data, best checkpoints per task, and a resume that ends bitwise equal
to an uninterrupted run."""
import json
import os

import pytest
import torch
import yaml

from conftest import invoke, write_cfg

NORM = {"type": "task_sync_bn", "kwargs": {"task_num": 2}}
DET = [{"type": "multitask_wrapper", "kwargs": {"cfg": {"idxs": [0]}}}]
CLS = [{"type": "multitask_wrapper", "kwargs": {"cfg": {"idxs": [1]}}}]
PIXELS = [{"type": "to_tensor"}, {"type": "normalize", "kwargs": {"mean": [0.485, 0.456, 0.406],
                                                                  "std": [0.229, 0.224, 0.225]}}]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    import test_up_configs

    return test_up_configs.up_data.__wrapped__(tmp_path_factory)


def multitask_cfg(data, **overrides):
    """resnet18 + FPN + an ATSS branch (task det) + an fpn_cls_head branch (task cls)."""
    (ann, img), (val_ann, val_img) = data["coco"]["train"], data["coco"]["val"]

    def coco(meta, image_dir, flip):
        steps = [{"type": "flip", "kwargs": {"flip_p": 0.5}}] if flip else []
        return {"type": "coco", "kwargs": {"meta_file": meta, "image_reader": {"type": "fs_pillow", "kwargs": {
            "image_dir": image_dir}}, "transformer": steps + [
                {"type": "keep_ar_resize", "kwargs": {"scales": [64], "max_size": 96}}] + PIXELS}}

    def cls(sub, train):
        steps = ([{"type": "torch_random_resized_crop", "kwargs": {"size": 32}}, {"type": "torch_random_horizontal_flip"}]
                 if train else [{"type": "torch_resize", "kwargs": {"size": 32}}])
        return {"type": "cls", "kwargs": {"meta_file": f"{data['root']}/{sub}.txt", "image_reader": {
            "type": "fs_pillow", "kwargs": {"image_dir": f"{data['root']}/images/{sub}"}}, "transformer": steps + PIXELS}}

    cfg = {
        "runtime": {"seed": 7},
        "dataset": {"train": coco(ann, img, True), "test": coco(val_ann, val_img, False), "batch_size": 2,
                    "test_batch_size": 4, "alignment": 32},
        "multitask": {
            "tasks": [{"name": "det", "train": "train", "test": "test", "heads": ["roi_head"]},
                      {"name": "cls", "train": "train_cls", "test": "test_cls", "heads": ["cls_head"]}],
            "datasets": {"train_cls": {**cls("train", True), "batch_size": 8},
                         "test_cls": {**cls("val", False), "batch_size": 6,
                                      "evaluator": {"type": "imagenet", "kwargs": {"topk": [1, 5]}}}}},
        "trainer": {"max_epoch": 2, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.01, "momentum": 0.9}},
                    "lr_scheduler": {"type": "MultiStepLR", "kwargs": {"milestones": [2]}, "warmup_epochs": 0}},
        "saver": {"save_dir": "checkpoints"},
        "hooks": [{"type": "auto_save_best_multitask"}, {"type": "auto_save_metric"}],
        "net": [
            {"name": "backbone", "type": "resnet18", "kwargs": {"out_layers": [2, 3, 4], "out_strides": [8, 16, 32],
                                                                "normalize": NORM}},
            {"name": "neck", "prev": "backbone", "type": "FPN", "kwargs": {
                "outplanes": 32, "start_level": 3, "num_level": 5, "out_strides": [8, 16, 32, 64, 128],
                "downsample": "conv", "upsample": "deconv", "normalize": NORM}},
            {"name": "roi_head", "prev": "neck", "type": "RetinaHeadWithBN", "wrappers": DET, "kwargs": {
                "feat_planes": 32, "num_classes": 11, "num_conv": 1, "normalize": NORM, "num_anchors": 2}},
            {"name": "retina_process", "prev": "roi_head", "type": "retina_post", "wrappers": DET, "kwargs": {
                "num_classes": 11, "cfg": {
                    "cls_loss": {"type": "quality_focal_loss", "kwargs": {"gamma": 2.0, "dynamic_normalizer": True}},
                    "loc_loss": {"type": "iou_loss", "kwargs": {"loss_type": "giou"}},
                    "anchor_generator": {"type": "hand_craft", "kwargs": {"anchor_ratios": [1],
                                                                          "anchor_scales": [6, 8]}},
                    "roi_supervisor": {"type": "atss", "kwargs": {"top_n": 18}},
                    "roi_predictor": {"type": "base", "kwargs": {"pre_nms_score_thresh": 0.05, "pre_nms_top_n": 100,
                                                                 "post_nms_top_n": 100, "roi_min_size": 0, "merger": {
                                                                     "type": "retina", "kwargs": {"top_n": 20, "nms": {
                                                                         "type": "naive", "nms_iou_thresh": 0.5}}}}}}}},
            {"name": "cls_head", "prev": "neck", "type": "fpn_cls_head", "wrappers": CLS,
             "kwargs": {"num_classes": 10, "feat_planes": 16}},
            {"name": "post_process", "type": "base_cls_postprocess", "wrappers": CLS, "kwargs": {"cls_loss": {
                "type": "label_smooth_ce", "kwargs": {"smooth_ratio": 0.1, "num_classes": 10}}}},
        ],
    }
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def train(path, run_dir, *extra):
    res = invoke(["train", "--config", path, "--work-dir", str(run_dir), "--device", "cpu", *extra])
    assert res.exit_code == 0, (res.stderr[-3000:], res.exception)
    return res


@pytest.mark.slow
def test_multitask_run_evaluates_each_task_keeps_its_best_and_resumes_bitwise(data, tmp_path):
    path = write_cfg(tmp_path / "mt.yaml", multitask_cfg(data))
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(path, straight)
    train(path, split, "--opts", "trainer.max_epoch=1")
    train(path, split, "--resume", str(split / "checkpoints" / "ckpt_e1.pth"))

    a = torch.load(straight / "checkpoints" / "ckpt_e2.pth", weights_only=True)
    b = torch.load(split / "checkpoints" / "ckpt_e2.pth", weights_only=True)
    assert a["iter"] == b["iter"] == 6  # 6 scenes / batch 2 = 3 steps an epoch; the 12 cls images go round 1.5 times
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    # task 1 (cls) normalised its batches with its own statistics, which moved away from task 0's
    assert not torch.equal(a["model"]["backbone.bn1.running_mean"], a["model"]["backbone.bn1.task1_running_mean"])
    metrics = a["state"]["metrics"]
    assert {"all.det.bbox.AP", "key.det.bbox.AP", "all.cls.top1", "key.cls.top1"} <= set(metrics)
    assert metrics["key.cls.top1"] == metrics["all.cls.top1"]
    for run in (straight, split):
        assert {"ckpt_best.det.pth", "ckpt_best.cls.pth"} <= set(os.listdir(run / "checkpoints"))
        assert {"cls", "det", "metrics.json", "results.jsonl"} <= set(os.listdir(run / "results_dir"))
        assert os.listdir(run / "results_dir" / "cls") == ["results.jsonl"]
    with open(straight / "checkpoints" / "metric.json") as f:
        straight_metrics = json.load(f)
    with open(split / "checkpoints" / "metric.json") as f:
        assert json.load(f) == straight_metrics  # one entry per evaluation, the resumed run's too
    assert [e["epoch"] for e in straight_metrics] == [1, 2]


def test_multitask_native_section_round_trips_through_up_config(data, tmp_path):
    path = write_cfg(tmp_path / "mt.yaml", multitask_cfg(data))
    res = invoke(["config", "--config", path])
    assert res.exit_code == 0, res.stderr
    resolved = yaml.safe_load(res.stdout)
    assert [t["name"] for t in resolved["multitask"]["tasks"]] == ["det", "cls"]
    again = write_cfg(tmp_path / "resolved.yaml", resolved)
    assert invoke(["config", "--config", again]).exit_code == 0


def test_task_norm_on_several_processes_is_refused_naming_it(data):
    import types

    from up_trainer.config import resolve_loaded
    from up_trainer.errors import ConfigError
    from up_trainer.multitask import attach_tasks
    from up_trainer.tasks.net import build_model

    cfg = resolve_loaded(multitask_cfg(data))
    model = build_model(cfg["net"])
    assert model.norm_task_count == 2 and model.head_names == ["roi_head", "cls_head"]
    two = types.SimpleNamespace(world_size=2, rank=0)
    with pytest.raises(ConfigError, match=r"^net: task_sync_bn on several processes is not built"):
        attach_tasks(cfg, model, None, None, None, None, two, True, None)
