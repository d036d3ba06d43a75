"""The census of UP's quantization, sparsity, detection-distillation, multitask, self-supervised and NAS
files (tests/fixtures/up: quant/, sparse/, distiller/det/, multitask/, ssl/, nas/, copied unchanged
from UP): each one passes ``up config`` unchanged, or stops with exit 2 and one line naming the UP
type and what to use instead. ``REFUSED`` lists the ones that stop, with the start of their line;
every file not listed must pass. docs/up/ has one page per family with the same table.
"""
import glob
import os

import pytest

from conftest import UP_FIXTURES, invoke

FOLDERS = ("quant", "sparse", "distiller/det", "multitask", "ssl", "nas")
FILES = sorted(os.path.relpath(path, UP_FIXTURES) for folder in FOLDERS
               for path in glob.glob(os.path.join(UP_FIXTURES, folder, "**", "*.yaml"), recursive=True))

# {file: the start of its one-line refusal}. One block per family, so each family's rows change alone.
REFUSED = {
    # -- distiller --
    'distiller/det/faster_rcnn/faster_rcnn_r152_50_1x_decouple_feature_mimic.yaml': "mimic.mimic_ins_type: UP's DeFeat mimic",
    'distiller/det/faster_rcnn/faster_rcnn_r152_50_1x_feature_mimic.yaml': "distill.mimic[0].student[0]: the student has no module 'neck.p2_conv'",
    'distiller/det/faster_rcnn/faster_rcnn_r152_50_1x_frs.yaml': "mimic.mimic_ins_type: UP's FRS mimic",
    'distiller/det/faster_rcnn/faster_rcnn_r152_50_1x_multi_jobs_multi_teacheres.yaml': "mimic.mimic_job0.mimic_ins_type: UP's FRS mimic",
    'distiller/det/faster_rcnn/faster_rcnn_r152_50_1x_sample_feature_mimic.yaml': "mimic.mimic_ins_type: UP's SampleFeature mimic",
    # -- multitask --
    # -- nas --
    'nas/bignas/cls/bignas_regnet_800m_sample_flops.yaml': "net[0].type: big_regnet is UP's BigNAS RegNet super-network",
    'nas/bignas/cls/bignas_regnet_800m_train_supnet.yaml': "net[0].type: big_regnet is UP's BigNAS RegNet super-network",
    'nas/bignas/det/bignas_retinanet_R18_sample_accuracy.yaml': "bignas.subnet.calib_bn: UP's sample_accuracy phase",
    'nas/retinanet-xmnet.yaml': "net[0].type: xmnet_search is UP's XMNet backbone decoded from a searched cell code",
    # -- quant --
    'quant/det/faster_rcnn/faster_rcnn_r18_FPN_2x_quant_qdrop.yaml': "net[2].kwargs.class_activation: 'softmax' is not supported for UP's NaiveRPN",
    'quant/det/retinanet/retinanet-r18-improve_quant_trt_qat.yaml': "net[2].type: RetinaHeadWithBNSep is UP's RetinaNet head with unshared per-level convs",
    'quant/det/retinanet/yolox_s_ret_a1_comloc_quant_trt_qat.yaml': "net[0].kwargs.normalize.type: YOLOX parts are built with BatchNorm2d",
    'quant/det/yolox/yolox_fpga_quant_vitis_qat.yaml': "hooks[0].kwargs.no_aug_epoch: must be between 0 (never) and max_epoch - 1 = 4, got 15",
    # -- sparse --
    # UP's own ImageNetEvaluator takes no num_classes either (UP stops there with a TypeError)
    'sparse/cls/resnet/res18_ampere_sparse.yaml': "dataset.evaluator.kwargs.num_classes: unknown argument",
    # -- ssl --
    'ssl/mae/mae_vit_base_patch16_dec512d8b_finetune.yaml': "trainer.optimizer.pconfig.layer_decay: UP's layer_decay (vit_base) is not supported",
}


def test_the_census_covers_every_file_of_these_folders():
    assert len(FILES) == 46
    assert set(REFUSED) <= set(FILES)


@pytest.mark.parametrize("rel", FILES)
def test_file_passes_up_config_or_is_refused_in_one_line(rel):
    res = invoke(["config", "--config", os.path.join(UP_FIXTURES, rel)])
    if rel not in REFUSED:
        assert res.exit_code == 0, res.stderr
        return
    assert res.exit_code == 2, (res.exit_code, res.stderr)
    lines = [line for line in res.stderr.strip().splitlines() if " given twice with different values" not in line]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith("up: error: " + REFUSED[rel]), lines[0]
