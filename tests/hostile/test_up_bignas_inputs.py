"""UP's BigNAS subnet files with hostile subnet settings, search spaces and static parts, through
``up config``: one line naming the key, exit 2, no traceback."""
import os

import pytest
import yaml

from conftest import UP_FIXTURES, invoke  # noqa: E402
from test_up_configs import data_opts, up_data  # noqa: F401  (tiny COCO digit scenes)
from up_trainer.config.loader import load_file

DET = os.path.join(UP_FIXTURES, "nas", "bignas", "det")
FINETUNE = os.path.join(DET, "bignas_retinanet_R18_finetune_subnet.yaml")
SUBNET = os.path.join(DET, "bignas_retinanet_R18_subnet.yaml")
SUPNET = os.path.join(DET, "bignas_retinanet_R18_train_supnet.yaml")
SETTINGS = "bignas.subnet.subnet_settings"


def _edited(tmp_path, source, edit):
    cfg = load_file(source)  # anchors resolved, anchor-only keys dropped
    edit(cfg)
    path = tmp_path / "bignas.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _setting(part, key, value):
    def edit(cfg):
        cfg["bignas"]["subnet"]["subnet_settings"].setdefault(part, {})[key] = value
    return edit


def _net(i, key, value):
    return lambda c: c["net"][i]["kwargs"].update({key: value})


FINETUNE_CASES = [
    (_setting("backbone", "depth", [1, 1, 2, 2, 7]), f"{SETTINGS}.backbone.depth[4]: 7 is not in the search space"),
    (_setting("backbone", "depth", [1, 1, 2, 2, 0]), f"{SETTINGS}.backbone.depth[4]: 0 is not in the search space"),
    (_setting("backbone", "out_channel", [32, 48, 96, 192, 400]),
     f"{SETTINGS}.backbone.out_channel[4]: 400 is not in the search space (the supernet's values for stage 4"),
    (_setting("backbone", "depth", [1, 1, 2]), f"{SETTINGS}.backbone.depth: 3 values but the supernet has 5 stages"),
    (_setting("backbone", "depth", "1,1,2,2,4"), f"{SETTINGS}.backbone.depth: expected a list"),
    (_setting("backbone", "depth", [1, True, 2, 2, 4]), f"{SETTINGS}.backbone.depth[1]: expected a number"),
    (_setting("backbone", "kernel_size", [3, 3, 3, 3, 5]), f"{SETTINGS}.backbone.kernel_size[4]: 5 is not in"),
    (_setting("backbone", "group_width", [8] * 5), f"{SETTINGS}.backbone.group_width: net[0].kwargs does not search"),
    (_setting("roi_head.cls_subnet", "out_channel", [100]), f"{SETTINGS}.roi_head.cls_subnet.out_channel[0]: 100"),
    (_setting("roi_head.box_subnet", "depth", [4, 4]), f"{SETTINGS}.roi_head.box_subnet.depth: 2 values"),
    (_setting("roi_head.iou_subnet", "depth", [4]), f"{SETTINGS}.roi_head.iou_subnet: not a part of the supernet head"),
    (_setting("bbox_head", "depth", [4]), f"{SETTINGS}.bbox_head: names no net entry"),
    (lambda c: c["bignas"]["subnet"].update(subnet_settings=5), f"{SETTINGS}: expected a mapping"),
    (lambda c: c["bignas"].update(distiller={"mimic": {}}), "bignas.distiller: UP's in-place distillation"),
    (lambda c: c["bignas"].update(sampler={}), "bignas.sampler: is not read by UP's bignas runner"),
    (lambda c: c["bignas"]["train"].update(sample_stratgy=["max"]), "bignas.train.sample_stratgy: is not read"),
    (lambda c: c["net"][0]["kwargs"]["out_channel"]["space"].update(stride=[16, 0, 32, 64, 128]),
     "net[0].kwargs.out_channel.space.stride: stage 1: no values between"),
    (lambda c: c["net"][0]["kwargs"]["depth"]["space"].update(max=[1, 3]),
     "net[0].kwargs.depth.space.max: expected one value per stage, as min: 5 numbers"),
    (lambda c: c["net"][0]["kwargs"].pop("depth"), "net[0].kwargs.depth: required by UP's big_resnet_basic"),
    (lambda c: c["dataset"].update(data_pool=["train:train", "test:train_calib"]), "dataset.data_pool: "),
]

SUBNET_CASES = [
    (_net(0, "depth", [1, 1, 2, 2, 0]), "net[0].kwargs.depth: expected numbers >= 1"),
    (_net(0, "depth", [1, 1, 2, 2]), "net[0].kwargs.depth: expected 5 values (one per stage)"),
    (_net(0, "kernel_size", [3, 3, 3, 4, 5]), "net[0].kwargs.kernel_size: [3, 3, 3, 4, 5]: kernel sizes are odd"),
    (_net(0, "task", "classification"), "net[0].kwargs.task: 'classification' is not supported"),
    (_net(1, "depth", [3, 4]), "net[1].kwargs.depth: [3, 4]: expected [3, 5]"),
    (_net(2, "num_anchors", 9), "net[2].kwargs.num_anchors: 9 but anchor_ratios x anchor_scales give 2"),
    (_net(2, "depth_cls", [0]), "net[2].kwargs.depth_cls: expected numbers >= 1"),
    (lambda c: c["net"][3]["kwargs"]["cfg"]["cls_loss"]["kwargs"].update(dynamic_normalizer="yes"),
     "net[3].kwargs.cfg.cls_loss.kwargs.dynamic_normalizer: expected a boolean"),
]



def _train(key, value):
    return lambda c: c["bignas"]["train"].update({key: value})


FLOPS = os.path.join(DET, "bignas_retinanet_R18_sample_flops.yaml")


def _subnet(key, value):
    return lambda c: c["bignas"]["subnet"].update({key: value})


FLOPS_CASES = [
    (_subnet("flops_range", ["100X", "400G"]), "bignas.subnet.flops_range[0]: expected a count such as '200G'"),
    (_subnet("flops_range", ["400G", "100G"]), "bignas.subnet.flops_range: ['400G', '100G']: low above high"),
    (_subnet("flops_range", "100G"), "bignas.subnet.flops_range: expected [low, high]"),
    (_subnet("subnet_count", 0), "bignas.subnet.subnet_count: expected a whole number 1..100000"),
    (_subnet("subnet_count", 10 ** 9), "bignas.subnet.subnet_count: expected a whole number 1..100000"),
    (_subnet("baseline_flops", "-1G"), "bignas.subnet.baseline_flops: expected a count"),
    (_subnet("sample_with_finetune", True), "bignas.subnet.sample_with_finetune: fine-tuning each sampled subnet"),
]

# UP's sample_accuracy file: up eval evaluates the sampled subnets (tasks/up_nets/bignas_accuracy.py)
ACCURACY = os.path.join(DET, "bignas_retinanet_R18_sample_accuracy.yaml")
ACCURACY_CASES = [
    (_subnet("subnet_count", 0), "bignas.subnet.subnet_count: expected a whole number 1..100000, got 0"),
    (_subnet("subnet_count", -4), "bignas.subnet.subnet_count: expected a whole number 1..100000, got -4"),
    (_subnet("subnet_count", 2.5), "bignas.subnet.subnet_count: expected a whole number 1..100000, got 2.5"),
    (_subnet("baseline_flops", "lots"), "bignas.subnet.baseline_flops: expected a count such as '200G'"),
    (_subnet("sample_with_finetune", True), "bignas.subnet.sample_with_finetune: fine-tuning each sampled subnet"),
    (lambda c: c["bignas"]["data"].update(metric1=5), "bignas.data.metric1: expected a metric name"),
]

SUPNET_CASES = [
    (_train("sample_subnet_num", 2), "bignas.train.sample_subnet_num: 2: several subnets per iteration"),
    (_train("sample_strategy", ["max", "middle"]), "bignas.train.sample_strategy: ['max', 'middle'] is not built"),
    (_train("sample_strategy", []), "bignas.train.sample_strategy: [] is not built"),
    (_train("valid_before_train", True), "bignas.train.valid_before_train: evaluating before training"),
    (lambda c: c["bignas"]["data"].update(image_size_list=[[1, 3, 512, 512], [1, 3, 768, 768]]),
     "bignas.data.image_size_list: several input sizes"),
    (lambda c: c["net"][0]["kwargs"]["out_channel"].update(sample_strategy="block_wise"),
     "net[0].kwargs.out_channel.sample_strategy: UP's 'block_wise' sampling is not built"),
    (lambda c: c["net"][0]["kwargs"]["out_channel"].update(sample_strategy="net_wise"),
     "net[0].kwargs.out_channel: net_wise sampling needs the same values in every stage"),
    (lambda c: c["net"][0]["kwargs"].update(kernel_transform=True), "net[0].kwargs.kernel_transform: True is not"),
    (lambda c: c["net"][2]["kwargs"].update(feat_planes=64), "net[2].kwargs.feat_planes: 64 is not supported"),
    (lambda c: c["net"][0]["kwargs"]["depth"]["space"].update(min=[1, 0, 2, 2, 4]),
     "net[0].kwargs.depth: stage 1 allows [0] (every stage keeps at least one block)"),
    (lambda c: c["net"][0]["kwargs"].update(kernel_size={"space": {"min": [3] * 5, "max": [3, 3, 3, 3, 4]},
                                                          "sample_strategy": "stage_wise"}),
     "net[0].kwargs.kernel_size.space.stride: required when min and max differ"),
]

REGNET = os.path.join(UP_FIXTURES, "nas", "bignas", "cls", "bignas_regnet_800m_train_supnet.yaml")


def _regnet_space(element, key, value):
    return lambda c: c["net"][0]["kwargs"][element]["space"].update({key: value})


REGNET_CASES = [  # the RegNet classification supernet's space and parts
    (_regnet_space("out_channel", "min", [32, 96, 96, 224, 576]),
     "net[0].kwargs.out_channel.space.min: stage 1: no values between min 96 and max 80"),
    (_regnet_space("depth", "min", [1, 1, 5, 5, 4]), "net[0].kwargs.depth.space.min: stage 2: no values between"),
    (_net(0, "group_width", [16, 16, 24, 16, 16]),
     "net[0].kwargs.group_width: stage 2: group width 24 does not divide the middle widths [128, 160]"),
    (_net(0, "group_width", [16, 16, 16, 16, 0]), "net[0].kwargs.group_width: stage 4 allows [0]"),
    (_net(0, "group_width", [16, 16, 16, 16, 1.5]), "net[0].kwargs.group_width: stage 4 allows [1.5]"),
    (_net(0, "expand_ratio", [1, 1, 1, 1]), "net[0].kwargs.expand_ratio: 4 stages"),
    (_net(0, "se_stages", [False, True, True, True, True]), "net[0].kwargs.se_stages: [False, True, True, True, "
     "True] is not supported for UP's big_regnet"),
    (_net(0, "task", "classification"),
     "net[0].kwargs.task: 'classification' is not supported for UP's big_regnet; only 'detection' (the supernet's own"),
    (_net(0, "normalize", {"type": "gn", "kwargs": {"num_groups": 8}}),
     "net[0].kwargs.normalize.type: an elastic net runs BatchNorm on slices"),
    (_net(1, "in_plane", 512), "net[1].kwargs.in_plane: 512 is not supported for UP's BigClsHead; only 768"),
    (_net(1, "num_classes", [10, 2]), "net[1].kwargs.num_classes: one positive class count"),
    (lambda c: c["net"][1].update(type="base_cls_head"), "net: the UP parts big_regnet + base_cls_head + "
     "base_cls_postprocess do not form a mapped BigNAS classifier"),
    (_train("sample_strategy", ["max", "middle"]), "bignas.train.sample_strategy: ['max', 'middle'] is not built"),
    (lambda c: c["bignas"].setdefault("subnet", {}).update(subnet_settings={"backbone": {"depth": [1, 1, 2, 5, 4]}}),
     "bignas.subnet.subnet_settings: a fixed subnet of UP's RegNet supernet"),
]


@pytest.mark.parametrize("source, edit, where", [(FINETUNE, e, w) for e, w in FINETUNE_CASES]
                         + [(SUBNET, e, w) for e, w in SUBNET_CASES] + [(SUPNET, e, w) for e, w in SUPNET_CASES]
                         + [(FLOPS, e, w) for e, w in FLOPS_CASES] + [(REGNET, e, w) for e, w in REGNET_CASES]
                         + [(ACCURACY, e, w) for e, w in ACCURACY_CASES])
def test_hostile_value_is_one_line_naming_the_key(tmp_path, source, edit, where):
    res = invoke(["config", "--config", _edited(tmp_path, source, edit)])
    assert res.exit_code == 2, res.stderr or res.exception
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("up: error: ") and "Traceback" not in res.stderr, res.stderr
    assert where in lines[0], lines[0]


@pytest.mark.parametrize("extra, where", [
    pytest.param(["bignas.subnet.flops_range=['1T','2T']"], "bignas.subnet.flops_range: none of the 20 subnets drawn",
                 marks=pytest.mark.slow),  # 20 FLOP counts of the supernet
    (["bignas.subnet.flops_range=['0.1G','2G']", "bignas.data.metric1=bbox.mAP"],
     "bignas.data.metric1: 'bbox.mAP' is not a metric of the evaluator"),
])
def test_sample_accuracy_at_run_time_is_one_line(tmp_path, up_data, extra, where):  # noqa: F811
    """up eval on the sample_accuracy file: a range no subnet falls in, a metric the evaluator
    does not report."""
    import torch

    from up_trainer.config import resolve_config
    from up_trainer.tasks.up_nets import build_up_net

    opts = data_opts("nas/bignas/det/bignas_retinanet_R18_sample_accuracy.yaml", up_data)
    ckpt = tmp_path / "supernet.pth"
    torch.save({"model": build_up_net(resolve_config(ACCURACY, opts)["net"]).state_dict()}, ckpt)
    res = invoke(["eval", "--config", ACCURACY, "--checkpoint", str(ckpt), "--work-dir", str(tmp_path / "ev"),
                  "--device", "cpu", "--opts", *opts, "bignas.subnet.subnet_count=1",
                  "dataset.dataloader.kwargs.num_workers=0", *extra])
    assert res.exit_code == 2, res.stderr or res.exception
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr and where in lines[0], res.stderr
