"""UP's quantization detector files brought three ways in: UP's RetinaHeadWithBNSep head, frozen
norms (mqbench_freeze_bn, ...) in YOLOX parts, and yolox_noaug counts beyond max_epoch. Each in
hostile shapes through ``up config``: one line naming the key, exit 2, no traceback; or, where
UP runs the value, the run with a note saying what UP does."""
import os

import pytest
import yaml

from conftest import UP_FIXTURES, invoke  # noqa: E402

SEP = os.path.join(UP_FIXTURES, "quant", "det", "retinanet", "retinanet-r18-improve_quant_trt_qat.yaml")
YOLOX_RET = os.path.join(UP_FIXTURES, "quant", "det", "retinanet", "yolox_s_ret_a1_comloc_quant_trt_qat.yaml")
VITIS = os.path.join(UP_FIXTURES, "quant", "det", "yolox", "yolox_fpga_quant_vitis_qat.yaml")
FILES = {"sep": SEP, "yolox_ret": YOLOX_RET, "vitis": VITIS}  # short test ids


def _edited(tmp_path, source, edit):
    with open(FILES.get(source, source), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg.pop("num_classes", None)  # an anchor-only key, written back without its anchor
    edit(cfg)
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _kwargs(index, **values):
    return lambda c: c["net"][index]["kwargs"].update(values)


def _hook(**values):
    return lambda c: c["hooks"][0]["kwargs"].update(values)


def _one_line(res):
    lines = [line for line in res.stderr.strip().splitlines() if " given twice with different values" not in line]
    assert res.exit_code == 2, (res.exit_code, res.stderr or res.exception)
    assert len(lines) == 1 and lines[0].startswith("up: error: ") and "Traceback" not in res.stderr, res.stderr
    return lines[0]


@pytest.mark.parametrize("source, edit, where", [
    ("sep", _kwargs(2, num_level=4), "net[2].kwargs.num_level: 4 is not supported for UP's RetinaHeadWithBNSep"),
    ("sep", _kwargs(2, num_level="5"), "net[2].kwargs.num_level: expected an integer, got '5'"),
    ("sep", _kwargs(2, num_conv=0), "net[2].kwargs.num_conv: must be >= 1"),
    ("sep", _kwargs(2, share_subnet=True), "net[2].kwargs.share_subnet: True is not supported"),
    ("sep", _kwargs(2, normalize={"type": "mqbench_freeze_bnn"}), "net[2].kwargs.normalize.type: UP norm "
                                                                "'mqbench_freeze_bnn' is not mapped"),
    ("sep", _kwargs(2, feat_planes=-256), "net[2].kwargs.feat_planes: must be >= 1"),
    ("sep", _kwargs(2, num_anchors=3), "net[2].kwargs.num_anchors: 3 but anchor_ratios x anchor_scales give 2"),
    ("yolox_ret", _kwargs(0, normalize={"type": "gn", "kwargs": {"num_groups": 8}}),
     "net[0].kwargs.normalize.type: YOLOX parts are built with BatchNorm2d or a frozen one"),
    ("yolox_ret", _kwargs(1, normalize={"type": "mqbench_freeze_bn", "kwargs": {"eps": 0.001}}),
     "net[1].kwargs.normalize.kwargs.eps"),
    ("yolox_ret", _kwargs(2, normalize={"type": "task_sync_bn", "kwargs": {"task_names": ["a"]}}),
     "net[2].kwargs.normalize"),
    ("vitis", _hook(no_aug_epoch="15"), "hooks[0].kwargs.no_aug_epoch: expected int"),
    ("vitis", _hook(no_aug_epoch=True), "hooks[0].kwargs.no_aug_epoch: expected int"),
    ("vitis", _hook(no_aug_epoch=-1), "hooks[0].kwargs.no_aug_epoch: must be between 0"),
    ("vitis", _hook(max_epoch=1), "hooks[0].kwargs.max_epoch: must be >= 2, got 1"),
    ("vitis", _hook(max_epoch=-5), "hooks[0].kwargs.max_epoch: must be >= 2"),
])
def test_hostile_value_is_one_line_naming_the_key(tmp_path, source, edit, where):
    line = _one_line(invoke(["config", "--config", _edited(tmp_path, source, edit)]))
    assert where in line, line


@pytest.mark.parametrize("no_aug_epoch", [15, 6, 10 ** 12])
def test_ups_no_aug_count_beyond_max_epoch_runs_from_the_first_epoch_with_a_note(tmp_path, no_aug_epoch):
    """UP's hook switches before its first iteration when no_aug_epoch > max_epoch (the Vitis
    file: 15 of 5 epochs); the file runs so, read as no_aug_epoch = max_epoch, and says it."""
    res = invoke(["config", "--config", _edited(tmp_path, VITIS, _hook(
        no_aug_epoch=no_aug_epoch))])
    assert res.exit_code == 0, res.stderr
    cfg = yaml.safe_load(res.stdout)
    hook = next(h for h in cfg["hooks"] if h["type"] == "yolox_noaug")
    assert hook["kwargs"]["no_aug_epoch"] == hook["kwargs"]["max_epoch"] == 5
    assert f"hooks[0].kwargs.no_aug_epoch: {no_aug_epoch} > max_epoch 5: UP's hook switches before the first " \
           "iteration, so every epoch trains on its transformer with the L1 loss; read as 5 (from epoch 1)" \
        in cfg["origin"]["notes"]


def test_a_count_within_max_epoch_is_read_as_written_without_a_note(tmp_path):
    res = invoke(["config", "--config", _edited(tmp_path, VITIS, _hook(
        no_aug_epoch=2))])
    assert res.exit_code == 0, res.stderr
    cfg = yaml.safe_load(res.stdout)
    assert next(h for h in cfg["hooks"] if h["type"] == "yolox_noaug")["kwargs"]["no_aug_epoch"] == 2
    assert not any("no_aug_epoch" in note for note in cfg["origin"]["notes"])
