"""UP's YOLOv6 net kwargs and the random_perspective / yolox_noaug values its files brought in,
in hostile shapes, through ``up config``: one line naming the key, exit 2, no traceback."""
import os

import pytest
import yaml

from conftest import UP_FIXTURES, invoke  # noqa: E402

V6N = os.path.join(UP_FIXTURES, "det", "yolov6", "yolox_v6n_ret_a2_comloc_400e_640x640_v6aug.yaml")


def _edited(tmp_path, edit):
    with open(V6N, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg = {k: v for k, v in cfg.items() if k in ("runtime", "dataset", "trainer", "saver", "hooks", "ema", "net")}
    edit(cfg)
    path = tmp_path / "v6.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _backbone(key, value):
    return lambda c: c["net"][0]["kwargs"].update({key: value})


def _perspective(key, value):
    return lambda c: c["dataset"]["train"]["dataset"]["kwargs"]["transformer"][1]["kwargs"].update({key: value})


@pytest.mark.parametrize("edit, where", [
    (_backbone("width_multiple", float("inf")), "net[0].kwargs.width_multiple: must be in (0, 16]"),
    (_backbone("width_multiple", float("nan")), "net[0].kwargs.width_multiple: must be in (0, 16]"),
    (_backbone("depth_multiple", -0.33), "net[0].kwargs.depth_multiple: must be in (0, 16]"),
    (_backbone("depth_multiple", "0.33"), "net[0].kwargs.depth_multiple: expected a number"),
    (_backbone("backbone_base_repeats", [1, 6, 12, 18, 10 ** 9]), "net[0].kwargs.backbone_base_repeats: expected 5"),
    (_backbone("backbone_base_channels", [64, 128, True, 512, 1024]), "net[0].kwargs.backbone_base_channels"),
    (_backbone("neck_base_channels", None), "net[0].kwargs.neck_base_channels: expected a list"),
    (_backbone("input_channels", 0), "net[0].kwargs.input_channels: must be >= 1"),
    (lambda c: c["net"][2]["kwargs"].update(anchors=-2), "net[2].kwargs.anchors"),
    (lambda c: c["net"][2]["kwargs"].update(prior_prob=1.0), "net[2].kwargs.prior_prob: must be in (0, 1)"),
    (lambda c: c["net"][2]["kwargs"].update(num_classes=1), "net[2].kwargs.num_classes"),
    (_perspective("scale", [0.5, 1.5]), "transforms[1].kwargs.scale: expected float/int, got list"),
    (_perspective("scale", 1.5), "scale: expected one number s in [0, 1)"),
    (_perspective("scale", float("nan")), "scale: expected one number s in [0, 1)"),
    (_perspective("border", "-320"), "transforms[1].kwargs.border: expected list/tuple"),
    (lambda c: c["hooks"][0]["kwargs"].update(no_aug_epoch=-1), "hooks[0].kwargs.no_aug_epoch: must be between 0"),
])
def test_hostile_value_is_one_line_naming_the_key(tmp_path, edit, where):
    res = invoke(["config", "--config", _edited(tmp_path, edit)])
    assert res.exit_code == 2, res.stderr or res.exception
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("up: error: ") and "Traceback" not in res.stderr, res.stderr
    assert where in lines[0], lines[0]


@pytest.mark.parametrize("content, message", [
    (None, "is not a file"),
    ("[[10, 13], [16, 30]", "cannot be read as JSON"),
    ("[[10, 13], [16, 30]]", "must hold 9 [w, h] pairs"),
    ('[[10, 13], [16, 30], [33, 23], [30, 61], [62, 45], [59, 119], [116, 90], [156, 198], [373, "326"]]',
     "must hold 9 [w, h] pairs"),
    ("[[10, 13], [16, 30], [33, 23], [30, 61], [62, 45], [59, 119], [116, 90], [156, 198], [373, -1]]",
     "positive pixel sizes"),
])
def test_hostile_yolov5_anchors_file_is_one_line(tmp_path, content, message):
    """UP's base_anchors_file (read when the net is built for a run) in hostile shapes."""
    from up_trainer.errors import ConfigError
    from up_trainer.tasks.net import build_model

    with open(os.path.join(UP_FIXTURES, "det", "yolov5", "yolov5_small_relu.yaml"), encoding="utf-8") as f:
        net = yaml.safe_load(f)["net"]
    path = tmp_path / "anchors.json"
    if content is not None:
        path.write_text(content)
    net[3]["kwargs"]["cfg"]["anchor_generator"]["kwargs"]["base_anchors_file"] = str(path)
    with pytest.raises(ConfigError) as err:
        build_model(net)
    text = str(err.value)
    assert text.startswith("net[3].kwargs.cfg.anchor_generator.kwargs.base_anchors_file") and message in text
    assert "\n" not in text


@pytest.mark.parametrize("act", ["relu", "silu"])
def test_ups_yolov5_files_pass_up_config_with_a_note_on_center_pad(act):
    res = invoke(["config", "--config", os.path.join(UP_FIXTURES, "det", "yolov5", f"yolov5_small_{act}.yaml")])
    assert res.exit_code == 0, res.stderr or res.exception
    assert "center_pad (UP's YOLOv5 centred batch padding) pads at the bottom and right here" in res.stdout


V5 = os.path.join(UP_FIXTURES, "det", "yolov5", "yolov5_small_relu.yaml")


def _v5_edited(tmp_path, index, key, value):
    with open(V5, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg = {k: v for k, v in cfg.items() if k in ("runtime", "dataset", "trainer", "saver", "ema", "net")}
    node = cfg["net"][index]["kwargs"]
    *parents, last = key.split(".")
    for part in parents:
        node = node[part]
    node[last] = value
    path = tmp_path / "v5.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("index, key, value, where", [
    (0, "init_planes", 10 ** 9, "net[0].kwargs.init_planes: a multiple of 8 in [8, 1024]"),
    (0, "csp1_block_nums", [1, 3, 3, 10 ** 6], "net[0].kwargs.csp1_block_nums: expected four integers in [1, 64]"),
    (0, "input_channels", -3, "net[0].kwargs.input_channels: must be in [1, 64]"),
    (1, "csp2_block_nums", 0, "net[1].kwargs.csp2_block_nums: must be in [1, 64]"),
    (2, "num_anchors_per_level", 10 ** 6, "net[2].kwargs.num_anchors_per_level: must be in [1, 16]"),
    (3, "loss_weights", [0.05, float("nan"), 0.5], "net[3].kwargs.loss_weights: expected [box, obj, cls]"),
    (3, "obj_loss_layer_weights", [4.0, 1.0], "net[3].kwargs.obj_loss_layer_weights: expected three numbers"),
    (3, "cfg.roi_predictor.kwargs.conf_thres", 1.5, "net[3].kwargs.cfg.roi_predictor.kwargs.conf_thres: must be in"),
    (3, "cfg.roi_predictor.kwargs.merger.kwargs.top_n", 0, "merger.kwargs.top_n: must be in [1, 100000]"),
    (3, "cfg.roi_predictor.kwargs.merger.kwargs.nms", {"type": "naive", "nms_iou_thresh": "0.6"}, "merger.kwargs.nms"),
    (3, "cfg.anchor_generator.kwargs.base_anchors_file", 7, "base_anchors_file: expected a string"),
])
def test_hostile_yolov5_value_is_one_line_naming_the_key(tmp_path, index, key, value, where):
    res = invoke(["config", "--config", _v5_edited(tmp_path, index, key, value)])
    assert res.exit_code == 2, res.stderr or res.exception
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("up: error: ") and "Traceback" not in res.stderr, res.stderr
    assert where in lines[0], lines[0]
