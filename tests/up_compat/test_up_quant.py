"""UP's quantization files: the ResNet-18 QAT file trains (``up train --dry-run``) with only data
paths, image size and batch size changed by --opts, fake quantizers in every conv and linear
layer; UP's names in the quant section map onto the native section or stop in one line."""
import os

import pytest
import yaml

from conftest import UP_FIXTURES, invoke, write_cfg
from test_up_configs import data_opts, dry_run, one_error_line, up_data  # noqa: F401 (fixture)

CLS_QAT = "quant/cls/resnet/res18_quant_trt_qat.yaml"


def test_ups_resnet18_qat_file_dry_runs_with_fake_quant(up_data, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    res = dry_run(CLS_QAT, up_data, run_dir)
    assert res.exit_code == 0, res.stderr or res.exception
    log = (run_dir / "train.log").read_text()
    assert "21 conv/linear layers fake-quantized for tensorrt (weights int8 symmetric per-channel, minmax, fixed, " \
           "activations int8 symmetric per-tensor, ema_minmax, fixed)" in log
    assert "dry run: train iteration 2/2" in log and "dry run: ok" in log


def test_the_translation_says_what_it_read():
    res = invoke(["config", "--config", os.path.join(UP_FIXTURES, CLS_QAT)])
    assert res.exit_code == 0, res.stderr
    cfg = yaml.safe_load(res.stdout)
    assert cfg["quant"]["backend"] == "tensorrt" and cfg["quant"]["activation"]["observer"] == "ema_minmax"
    assert cfg["saver"]["pretrain_model"] == "pretrained_fp32/res18.pth" and cfg["saver"]["resume_model"] is None
    assert "quant.prepare_args.leaf_module: recorded" in res.stdout


@pytest.mark.parametrize("edit, line", [
    (lambda q: q["prepare_args"]["extra_qconfig_dict"].update(a_observer="ClipStdObserver"),
     "quant.prepare_args.extra_qconfig_dict.a_observer: UP's observer 'ClipStdObserver' is not mapped"),
    (lambda q: q["prepare_args"]["extra_qconfig_dict"].update(w_fakequantize="AdaRoundFakeQuantize"),
     "quant.prepare_args.extra_qconfig_dict.w_fakequantize: UP's AdaRoundFakeQuantize (AdaRound's learned rounding)"),
    (lambda q: q.update(deploy_backend="snpe"), "quant.deploy_backend: UP's snpe backend"),
    (lambda q: q.update(deploy_backend="tensorrtt"), "quant.deploy_backend: 'tensorrtt' is not a UP backend "
                                                     "(did you mean 'tensorrt'?)"),
    (lambda q: q.update(quant_typ="qat"), "quant.quant_typ: is not read by UP's quant runner"),
    (lambda q: q.update(quant_type="calib_only"), "quant.quant_type: 'calib_only' is not one of qat, ptq (UP)"),
    (lambda q: q.update(quant_type="ptq", ptq={"round_mode": "learned_sigmoid"}),
     "quant.ptq.round_mode: UP's round mode 'learned_sigmoid' is not built (learned_hard_sigmoid"),
    (lambda q: q.update(quant_type="ptq", ptq={"pattern": "net"}), "quant.ptq.pattern: 'net' is not one of layer, block"),
    (lambda q: q.update(quant_type="ptq", ptq={"prob": 1.5}), "quant.ptq.prob: expected the chance an activation is "
                                                             "quantized, in [0, 1], got 1.5"),
    (lambda q: q.update(quant_type="ptq", ptq={"max_count": -1}), "quant.ptq.max_count: expected an integer >= 1"),
    (lambda q: q.update(quant_type="ptq", ptq={"max_cont": 10}), "quant.ptq.max_cont: is not read by UP's ptq "
                                                                "reconstruction (did you mean 'max_count'?)"),
    (lambda q: q.update(quant_type="ptq", tricks={"speical": []}), "quant.tricks.speical: is not read by UP's quant "
                                                                  "runner (did you mean 'special'?)"),
])
def test_up_quant_names_mapped_or_refused_in_one_line(tmp_path, edit, line):
    with open(os.path.join(UP_FIXTURES, CLS_QAT), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg.pop("num_classes")  # an anchor-only key of the file; written back without its anchor
    edit(cfg["quant"])
    res = invoke(["config", "--config", write_cfg(tmp_path / "q.yaml", cfg)])
    assert res.exit_code == 2 and one_error_line(res), res.stderr
    assert res.stderr.strip().startswith("up: error: " + line), res.stderr


def test_learnable_fake_quantize_maps_to_lsq(tmp_path):
    with open(os.path.join(UP_FIXTURES, CLS_QAT), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg.pop("num_classes")  # an anchor-only key of the file; written back without its anchor
    cfg["quant"]["prepare_args"]["extra_qconfig_dict"]["a_fakequantize"] = "LearnableFakeQuantize"
    res = invoke(["config", "--config", write_cfg(tmp_path / "q.yaml", cfg)])
    assert res.exit_code == 0, res.stderr
    assert yaml.safe_load(res.stdout)["quant"]["activation"]["fake_quantize"] == "learnable"


def test_ups_vitis_yolox_file_runs_with_its_no_aug_epochs_within_the_run():
    """UP's FPGA file: Vitis power-of-two scheme on YOLOX, register_type qat_weights, read once its
    yolox_noaug epochs (15) fit its 5-epoch run."""
    rel = "quant/det/yolox/yolox_fpga_quant_vitis_qat.yaml"
    res = invoke(["config", "--config", os.path.join(UP_FIXTURES, rel)])
    assert res.exit_code == 2 and "hooks[0].kwargs.no_aug_epoch: must be between 0" in res.stderr
    res = invoke(["config", "--config", os.path.join(UP_FIXTURES, rel), "--opts", "hooks.0.kwargs.no_aug_epoch=4"])
    assert res.exit_code == 0, res.stderr
    quant = yaml.safe_load(res.stdout)["quant"]
    assert quant["backend"] == "vitis" and quant["weight"]["pot_scale"] and not quant["weight"]["per_channel"]


def test_a_typed_definition_named_like_a_plain_section_is_dropped_but_not_like_a_typed_one(tmp_path):
    """UP's improve files leave ``train_resize: {type: keep_ar_resize}`` unreferenced: close to
    ``trainer``, which never holds a ``type``, so it is a definition (dropped, said so);
    ``nett: {type: ...}`` may be a misspelt ``net`` and still fails."""
    with open(os.path.join(UP_FIXTURES, CLS_QAT), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg.pop("num_classes")
    cfg["train_resize"] = {"type": "keep_ar_resize", "kwargs": {"scales": [640]}}
    res = invoke(["config", "--config", write_cfg(tmp_path / "a.yaml", cfg)])
    assert res.exit_code == 0, res.stderr
    assert "train_resize: a keep_ar_resize definition nothing refers to; ignored as in UP" in res.stdout
    cfg["nett"] = {"type": "resnet18"}
    res = invoke(["config", "--config", write_cfg(tmp_path / "b.yaml", cfg)])
    assert res.exit_code == 2 and "nett: unknown section (did you mean 'net'?)" in res.stderr, res.stderr


PTQ_QDROP = "quant/det/retinanet/retinanet-r50-w2a4-qdrop.yaml"


@pytest.mark.slow
def test_ups_retinanet_w2a4_qdrop_file_dry_runs_calibration_and_reconstruction(up_data, tmp_path):  # noqa: F811
    """UP's QDrop file (quant_type: ptq, 2-bit weights, 4-bit activations, the stem conv at 8 bits):
    a dry run calibrates on 2 train batches and reconstructs each block for 2 iterations."""
    run_dir = tmp_path / "run"
    res = dry_run(PTQ_QDROP, up_data, run_dir)
    assert res.exit_code == 0, res.stderr or res.exception
    assert os.listdir(run_dir) == ["train.log"]
    log = (run_dir / "train.log").read_text()
    assert "quant.tricks.special: UP's backbone.layer0.0 is backbone.conv1 here" in log
    assert "weights int2 asymmetric per-channel, mse" in log and "activations int4 asymmetric per-tensor, ema_mse" in log
    assert "ptq: qdrop on 2 calibration batch(es)" in log and "(round-to-nearest -> learned rounding)" in log
    assert "dry run: ptq calibrated on 2 batch(es)" in log and "dry run: ok" in log
