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


def test_ups_vitis_yolox_file_reads_its_no_aug_epochs_beyond_the_run_as_ups_hook_does():
    """UP's FPGA file: Vitis power-of-two scheme on YOLOX, register_type qat_weights; its
    yolox_noaug's 15 no-aug epochs of 5 switch before the first iteration in UP, so here too."""
    rel = "quant/det/yolox/yolox_fpga_quant_vitis_qat.yaml"
    res = invoke(["config", "--config", os.path.join(UP_FIXTURES, rel)])
    assert res.exit_code == 0, res.stderr
    cfg = yaml.safe_load(res.stdout)
    quant = cfg["quant"]
    assert quant["backend"] == "vitis" and quant["weight"]["pot_scale"] and not quant["weight"]["per_channel"]
    assert cfg["hooks"][0]["type"] == "yolox_noaug" and cfg["hooks"][0]["kwargs"]["no_aug_epoch"] == 5
    assert any(note.startswith("hooks[0].kwargs.no_aug_epoch: 15 > max_epoch 5: UP's hook switches before the first "
                               "iteration") for note in cfg["origin"]["notes"])


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


# -- the detector files ----------------------------------------------------------------------
RETINA_SEP_QAT = "quant/det/retinanet/retinanet-r18-improve_quant_trt_qat.yaml"
YOLOX_RETINA_QAT = "quant/det/retinanet/yolox_s_ret_a1_comloc_quant_trt_qat.yaml"
YOLOX_VITIS_QAT = "quant/det/yolox/yolox_fpga_quant_vitis_qat.yaml"


@pytest.mark.slow  # about 20 s of CPU each, 40-70 s on a shared machine
@pytest.mark.parametrize("rel, layers", [(RETINA_SEP_QAT, "70 conv/linear layers fake-quantized for tensorrt"),
                                         (YOLOX_RETINA_QAT, "conv/linear layers fake-quantized for tensorrt"),
                                         (YOLOX_VITIS_QAT, "88 conv/linear layers fake-quantized for vitis")])
def test_ups_detector_qat_files_dry_run(rel, layers, up_data, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    res = dry_run(rel, up_data, run_dir)
    assert res.exit_code == 0, res.stderr or res.exception
    log = (run_dir / "train.log").read_text()
    assert layers in log
    assert "dry run: train iteration 2/2" in log and "dry run: ok" in log


def _net(rel, **head):
    with open(os.path.join(UP_FIXTURES, rel), encoding="utf-8") as f:
        net = yaml.safe_load(f)["net"]
    net[2]["kwargs"].update(head)
    return net


def test_retina_head_with_bn_sep_has_convs_and_norms_of_its_own_per_level_under_ups_names():
    """UP's RetinaHeadWithBNSep: per level, num_conv (conv, norm, ReLU) blocks of its own in each
    tower (RetinaHeadWithBN shares the convs); the two prediction convs serve every level. The
    head's parameter names are UP's, so UP's checkpoints load unrenamed."""
    import torch
    from torchvision.ops.misc import FrozenBatchNorm2d

    from up_trainer.tasks.up_nets import build_up_net

    torch.manual_seed(0)
    model = build_up_net(_net(RETINA_SEP_QAT, feat_planes=8, num_conv=2))
    head = model.roi_head if hasattr(model, "roi_head") else model.head
    levels, convs = 5, 2
    up_names = {f"{tower}.{lvl}.{i}.0.weight" for tower in ("cls_subnet", "box_subnet") for lvl in range(levels)
                for i in range(convs)}
    up_names |= {f"{tower}.{lvl}.{i}.1.{b}" for tower in ("cls_subnet", "box_subnet") for lvl in range(levels)
                 for i in range(convs) for b in ("weight", "bias", "running_mean", "running_var")}
    up_names |= {f"{pred}.{p}" for pred in ("cls_subnet_pred", "box_subnet_pred") for p in ("weight", "bias")}
    assert set(head.state_dict()) == up_names
    assert all(isinstance(head.cls_subnet[lvl][i][1], FrozenBatchNorm2d) for lvl in range(levels) for i in range(convs))
    weights = {head.cls_subnet[lvl][i][0].weight.data_ptr() for lvl in range(levels) for i in range(convs)}
    assert len(weights) == levels * convs  # nothing shared between levels

    shared = build_up_net([dict(e, type="RetinaHeadWithBN") if e["name"] == "roi_head" else e
                           for e in _net(RETINA_SEP_QAT, feat_planes=8, num_conv=2)])
    shared_head = shared.roi_head if hasattr(shared, "roi_head") else shared.head
    assert len({shared_head.cls_subnet[lvl][0][0].weight.data_ptr() for lvl in range(levels)}) == 1
    assert sum(p.numel() for p in head.parameters()) - sum(p.numel() for p in shared_head.parameters()) \
        == 2 * (levels - 1) * (8 * 256 * 9 + 8 * 8 * 9)  # two towers, one 256->8 and one 8->8 conv per extra level

    # A UP checkpoint with a different value per level lands on each level's own conv.
    state = {k: torch.full_like(v, float(k.split(".")[1]) if k.split(".")[1].isdigit() else -1.0)
             for k, v in head.state_dict().items()}
    head.load_state_dict(state)
    assert [float(head.box_subnet[lvl][1][0].weight.detach().mean()) for lvl in range(levels)] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_yolox_parts_take_the_frozen_norm_of_ups_quant_file_in_place_of_every_batchnorm():
    import torch
    from torch import nn
    from torchvision.ops.misc import FrozenBatchNorm2d

    from up_trainer.tasks.up_nets import build_up_net

    model = build_up_net(_net(YOLOX_RETINA_QAT))
    norms = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, FrozenBatchNorm2d))]
    assert norms and all(type(m) is FrozenBatchNorm2d for m in norms)
    model.train()
    before = [(m.running_mean.clone(), m.weight.clone()) for m in norms]
    out = model.backbone(torch.rand(2, 3, 64, 64) * 255)
    sum(o.sum() for o in (out.values() if isinstance(out, dict) else out)).backward()
    # statistics fixed while training, affine buffers with no gradient to learn from
    assert all(torch.equal(mean, m.running_mean) and torch.equal(w, m.weight) for (mean, w), m in zip(before, norms))
    assert not any(p.requires_grad for m in norms for p in m.parameters(recurse=False))


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
