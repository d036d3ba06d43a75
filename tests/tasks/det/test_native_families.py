"""The detection families that UP's files reach have native net types too (yolov5, yolov6, up_fcos,
onenet, cascade_rcnn / faster_rcnn_c4 / rfcn): their digits configs resolve and dry-run, a
native entry and the UP file it matches build the same parts (UP translation only maps kwargs
onto the native builder), and a bad native kwarg is one line naming it."""
import os

import pytest
import torch
import yaml
from click.testing import CliRunner

from up_trainer.cli import main
from up_trainer.errors import ConfigError
from up_trainer.registry import MODELS
from up_trainer.tasks.net import build_model
from conftest import REPO, UP_FIXTURES  # noqa: E402

CONFIGS = ["digits_yolov5", "digits_yolov6", "digits_up_fcos", "digits_onenet", "digits_cascade_rcnn"]
TINY = ["dataset.train.kwargs.num_images=4", "dataset.test.kwargs.num_images=2", "dataset.batch_size=2",
        "dataset.test_batch_size=2"]


@pytest.mark.parametrize("name", CONFIGS)
def test_native_config_resolves_and_dry_runs(name, tmp_path):
    config = os.path.join(REPO, "configs", "det", f"{name}.yaml")
    runner = CliRunner()
    res = runner.invoke(main, ["config", "--config", config])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert yaml.safe_load(res.output)["net"]["type"] == name.split("_", 1)[1]
    res = runner.invoke(main, ["train", "--config", config, "--dry-run", "--work-dir", str(tmp_path), "--opts", *TINY])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "dry run: ok" in res.output


def up_file_net(rel):
    with open(os.path.join(UP_FIXTURES, "det", rel), encoding="utf-8") as f:
        return yaml.safe_load(f)["net"]


def shapes(module, prefix=""):
    """Parameter and buffer shapes (BatchNorm's batch counter left out: UP's freeze_bn keeps one,
    torchvision's FrozenBatchNorm2d does not)."""
    return {k: tuple(v.shape) for k, v in module.state_dict().items()
            if k.startswith(prefix) and not k.endswith("num_batches_tracked")}


def test_yolov5_up_file_and_native_entry_build_the_same_net():
    up = up_file_net("yolov5/yolov5_small_silu.yaml")
    up[3]["kwargs"]["cfg"]["anchor_generator"]["kwargs"]["base_anchors_file"] = \
        os.path.join(UP_FIXTURES, "det", "yolov5", "anchors.json")
    with torch.device("meta"):
        from_up = build_model(up)
        native = build_model({"type": "yolov5", "kwargs": {"num_classes": 80, "act": "silu"}})
    assert type(from_up) is type(native) and shapes(from_up) == shapes(native)
    assert from_up.criterion_kwargs == native.criterion_kwargs
    assert from_up.predictor_kwargs == {**native.predictor_kwargs, "nms_thresh": from_up.predictor_kwargs["nms_thresh"]}
    bn = [m for m in from_up.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bn and all((m.eps, m.momentum) == (1e-3, 0.03) for m in bn)  # yolov5_init through the native kwarg


def settings(part, *drop):
    """A criterion's or predictor's settings (its box coder and assigner compared apart)."""
    return {k: v for k, v in vars(part).items() if k not in ("box_coder", "assigner", *drop)}


@pytest.mark.parametrize("size, kwargs", [("n", {"width_multiple": 0.25}),
                                          ("s", {"width_multiple": 0.5, "top_k": 18})])
def test_yolov6_up_files_and_native_entry_build_the_same_net(size, kwargs):
    from_up = build_model(up_file_net(f"yolov6/yolox_v6{size}_ret_a2_comloc_400e_640x640.yaml"))  # real: anchors read
    native = build_model({"type": "yolov6", "kwargs": {"num_classes": 80, "nms_thresh": 0.65, **kwargs}})
    assert type(from_up) is type(native) and shapes(from_up) == shapes(native)
    assert settings(from_up.criterion) == settings(native.criterion)
    assert vars(from_up.criterion.assigner) == vars(native.criterion.assigner)
    assert settings(from_up.predictor) == settings(native.predictor)
    assert [c.tolist() for c in from_up.cell_anchors] == [c.tolist() for c in native.cell_anchors]
    assert (from_up.class_first, from_up.strides) == (native.class_first, native.strides)


def test_up_fcos_and_onenet_heads_match_their_up_files():
    """UP's files keep UP's ResNet and FPN (UP's weight names); the family's own parts are the
    native builder's, so the heads, criteria and predictors match."""
    with torch.device("meta"):
        fcos_up = build_model(up_file_net("fcos/fcos-R50-1x.yaml"))
        fcos = MODELS.build({"type": "up_fcos", "kwargs": {"num_classes": 80, "head_norm": "gn",
                                                             "center_sample": True, "pos_radius": 1.5,
                                                             "norm_on_bbox": True, "nms_thresh": 0.65}})
    onenet_up = build_model(up_file_net("onenet/onenet-r18.yaml"))  # ResNet-18: built for real, its anchors read
    onenet = MODELS.build({"type": "onenet", "kwargs": {"num_classes": 80, "image_mean": None, "image_std": None}})
    assert shapes(fcos_up, "roi_head.") == shapes(fcos, "roi_head.")
    assert vars(fcos_up.criterion) == vars(fcos.criterion)
    assert vars(fcos_up.postprocess) == vars(fcos.postprocess)
    assert shapes(onenet_up, "roi_head.") == shapes(onenet, "roi_head.")
    assert [c.tolist() for c in onenet_up.cell_anchors] == [c.tolist() for c in onenet.cell_anchors]
    assert vars(onenet_up.criterion.matcher) == vars(onenet.criterion.matcher)


@pytest.mark.parametrize("rel, entry", [
    ("faster_rcnn/faster_rcnn_r50_C4_1x.yaml", {"type": "faster_rcnn_c4", "kwargs": {
        "pool_size": 7, "rpn_channels": 512, "rpn_low_quality_thresh": 0.3, "rpn_pre_nms_top_n": [12000, 6000],
        "rpn_post_nms_top_n": [2000, 300]}}),
    ("rfcn/rfcn-R50-1x.yaml", {"type": "rfcn", "kwargs": {"rpn_channels": 256, "anchor_scales": [8, 16, 32],
                                                      "rpn_low_quality_thresh": 0.1}}),
    ("cascade_rcnn/cascade-rcnn-R50-FPN-1x.yaml", {"type": "cascade_rcnn", "kwargs": {"rpn_low_quality_thresh": 0.1}}),
])
def test_two_stage_up_files_and_native_entries_build_the_same_stages(rel, entry):
    """UP's ResNet (and FPN) keep UP's names; the proposal and box stages are the native
    builders', so their parameters and settings match the native entry's."""
    with torch.device("meta"):
        from_up, native = build_model(up_file_net(rel)), build_model(entry)

    def stage(model, role):
        return getattr(model, model.names[role])

    for role in ("rpn", "box"):
        assert shapes(stage(from_up, role)) == shapes(stage(native, role)), role
    up_box, box = stage(from_up, "box"), stage(native, "box")
    assert [vars(m) for m in up_box.matchers] == [vars(m) for m in box.matchers]
    assert [list(c.weights) for c in up_box.coders] == [pytest.approx(list(c.weights), rel=1e-2) for c in box.coders]
    assert (up_box.weights, up_box.ensemble) == (box.weights, box.ensemble)
    assert vars(stage(from_up, "rpn").proposal_matcher) == vars(stage(native, "rpn").proposal_matcher)


@pytest.mark.parametrize("entry, fragment", [
    ({"type": "yolov5", "kwargs": {"width": 12}}, "net.kwargs.width: the stem's channels: a multiple of 8"),
    ({"type": "yolov5", "kwargs": {"anchors_per_level": 2}}, "net.kwargs.anchors: required when anchors_per_level"),
    ({"type": "yolov5", "kwargs": {"act": "gelu"}}, "net.kwargs.act: 'gelu' is not one of hardswish"),
    ({"type": "up_fcos", "kwargs": {"extra_levels": 1}}, "net.kwargs.loc_ranges: required for 4 pyramid levels"),
    ({"type": "yolov6", "kwargs": {"width_multiple": 0}}, "net.kwargs.width_multiple: must be a number in (0, 16]"),
    ({"type": "onenet", "kwargs": {"cls_loss": "ce"}}, "net.kwargs.cls_loss: 'ce' is not one of qfl, focal"),
    ({"type": "faster_rcnn_c4", "kwargs": {"pool_size": 9}}, "net.kwargs.pool_size: expected 7 or 14, got 9"),
    ({"type": "cascade_rcnn", "kwargs": {"stage_fg_iou": [0.5, 0.6]}},
     "net.kwargs.stage_bg_iou: 3 values for the 2 stages"),
])
def test_bad_native_kwargs_name_the_key(entry, fragment):
    with torch.device("meta"), pytest.raises(ConfigError) as info:
        build_model(entry)
    assert fragment in str(info.value)
