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
        steps = [{"type": "torch_resize", "kwargs": {"size": 32}}]
        if train:
            steps = [{"type": "torch_random_resized_crop", "kwargs": {"size": 32}},
                     {"type": "torch_random_horizontal_flip"}]
        reader = {"type": "fs_pillow", "kwargs": {"image_dir": f"{data['root']}/images/{sub}"}}
        return {"type": "cls", "kwargs": {"meta_file": f"{data['root']}/{sub}.txt", "image_reader": reader,
                                          "transformer": steps + PIXELS}}

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


def test_task_norm_keeps_running_statistics_per_task():
    from up_trainer.tasks.up_nets.task_norm import TaskBatchNorm2d

    torch.manual_seed(0)
    bn = TaskBatchNorm2d(3, task_num=2)
    with torch.no_grad():
        bn.running_mean.fill_(0.5)  # as loaded from pretrained weights: task 1 starts from them
    x = torch.randn(4, 3, 5, 5) + 2
    bn.set_task(1)
    bn(x)
    assert torch.equal(bn.running_mean, torch.full((3,), 0.5))  # task 0's statistics untouched
    assert torch.allclose(bn.task1_running_mean, 0.9 * 0.5 + 0.1 * x.mean((0, 2, 3)))
    bn.eval()
    bn.set_task(0)
    y0 = bn(x)
    bn.set_task(1)
    assert not torch.allclose(y0, bn(x))  # evaluation normalises with the task's own statistics
    with pytest.raises(IndexError):
        bn.set_task(2)


def test_dynamic_normalizer_is_ups_focal_weight_of_the_batch():
    from up_trainer.tasks.det.atss.losses import dynamic_normalizer

    logits = torch.tensor([[2.0, -1.0], [0.5, 0.0], [-3.0, 1.0], [0.0, 0.0]])
    labels = torch.tensor([1, 0, 2, -1])  # two positives (classes 1, 2), one negative, one ignored
    p = logits.sigmoid()
    pos = (1 - p[0, 0]) ** 2 + (1 - p[2, 1]) ** 2
    neg = (p[:3] ** 2).sum() - p[0, 0] ** 2 - p[2, 1] ** 2
    assert torch.allclose(dynamic_normalizer(logits, labels, 2.0), (0.5 * pos + 0.5 * neg).clamp(min=1))
    assert dynamic_normalizer(torch.full((2, 2), -9.0), torch.tensor([0, 0]), 2.0) == 1  # at least 1


def test_deconv_fpn_doubles_each_level_with_one_transposed_conv():
    from collections import OrderedDict

    from up_trainer.tasks.up_nets.deconv_fpn import DeconvFPN

    fpn = DeconvFPN([8, 16], 4)
    out = fpn(OrderedDict([("0", torch.randn(1, 8, 8, 8)), ("1", torch.randn(1, 16, 4, 4))]))
    assert [tuple(v.shape) for v in out.values()] == [(1, 4, 8, 8), (1, 4, 4, 4)]
    assert {k for k in fpn.state_dict() if k.startswith("deconv.")} == {"deconv.weight", "deconv.bias"}
    with pytest.raises(ValueError, match="alignment"):
        fpn(OrderedDict([("0", torch.randn(1, 8, 7, 7)), ("1", torch.randn(1, 16, 4, 4))]))


class _Numbers(torch.utils.data.Dataset):
    def __init__(self, n, base):
        self.n, self.base = n, base

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(self.base + i)


def test_each_task_s_data_continues_from_the_step_number_alone():
    """dataset.train (6 samples, batch 2: 3 steps an epoch) sets the epoch; a task with 10
    samples in batches of 4 (3 batches a pass) starts a new, reshuffled pass when it runs out;
    a loader started mid-run (a resume) yields what the uninterrupted one does from there."""
    from conftest import loader_cfg
    from up_trainer.data.loader import LoaderFactory
    from up_trainer.multitask.loaders import MultiTaskLoaders, TaskData

    def loaders():
        main = LoaderFactory(loader_cfg(batch_size=2), _Numbers(6, 0), None, seed=3)
        task = LoaderFactory(loader_cfg(batch_size=4), _Numbers(10, 100), None, seed=4)
        return MultiTaskLoaders(main, [TaskData("det", None, None), TaskData("cls", task, None)])

    def steps(mt, epoch, start=0):
        return [[b.tolist() for b in batches] for batches in mt.train_loader(epoch, start_batch=start)]

    mt = loaders()
    straight = steps(mt, 1) + steps(mt, 2) + steps(mt, 3)
    assert len(straight) == 9
    passes = [sorted(sum((s[1] for s in straight[i:i + 3]), [])) for i in (0, 3, 6)]
    assert passes == [list(range(100, 110))] * 3  # every pass sees each sample once
    assert straight[0][1] != straight[3][1]  # and in a new order
    assert steps(loaders(), 2, start=1) + steps(loaders(), 3) == straight[4:]
