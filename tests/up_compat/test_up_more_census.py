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
    # -- multitask --
    'multitask/r50-retina-atss-qfl+cls.yaml': "runtime.runner.type: UP's 'multitask' runner is not mapped",
    'multitask/r50-retina-atss-qfl.yaml': "runtime.runner.type: UP's 'multitask' runner is not mapped",
    # -- nas --
    'nas/bignas/cls/bignas_regnet_800m_sample_flops.yaml': "runtime.runner.type: UP's 'bignas' runner is not mapped",
    'nas/bignas/cls/bignas_regnet_800m_train_supnet.yaml': "runtime.runner.type: UP's 'bignas' runner is not mapped",
    'nas/bignas/det/bignas_retinanet_R18_evaluate_subnet.yaml': "runtime.runner.type: UP's 'bignas' runner is not mapped",
    'nas/bignas/det/bignas_retinanet_R18_finetune_subnet.yaml': "runtime.runner.type: UP's 'bignas' runner is not mapped",
    'nas/bignas/det/bignas_retinanet_R18_sample_accuracy.yaml': "runtime.runner.type: UP's 'bignas' runner is not mapped",
    'nas/bignas/det/bignas_retinanet_R18_sample_flops.yaml': "runtime.runner.type: UP's 'bignas' runner is not mapped",
    'nas/bignas/det/bignas_retinanet_R18_subnet.yaml': "runtime.runner.type: UP's 'bignas' runner is not mapped",
    'nas/bignas/det/bignas_retinanet_R18_train_supnet.yaml': "runtime.runner.type: UP's 'bignas' runner is not mapped",
    'nas/retinanet-xmnet.yaml': "net[0].type: xmnet_search is UP's XMNet NAS search space, which up-trainer does not map on",
    # -- quant --
    'quant/cls/res18_quant_trt_qat.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    'quant/cls/resnet/res18_quant_trt_qat.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    'quant/det/faster_rcnn/faster_rcnn_r18_FPN_2x_quant_qdrop.yaml': "runtime.runner.type: UP's 'quant_ptq' runner is not mapped",
    'quant/det/faster_rcnn/faster_rcnn_r50_fpn_improve_quant_trt_qat.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    'quant/det/faster_rcnn/faster_rcnn_r50_fpn_improve_quant_trt_qat_deploy.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    'quant/det/retinanet/retinanet-r18-improve_quant_trt_qat.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    'quant/det/retinanet/retinanet-r50-w2a4-ada.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    'quant/det/retinanet/retinanet-r50-w2a4-brecq.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    'quant/det/retinanet/retinanet-r50-w2a4-qdrop.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    'quant/det/retinanet/yolox_s_ret_a1_comloc_quant_trt_qat.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    'quant/det/yolox/yolox_fpga_quant_vitis_qat.yaml': "runtime.runner.type: UP's 'quant' runner is not mapped",
    # -- sparse --
    'sparse/cls/resnet/res18_amba_sparse.yaml': "runtime.runner.type: UP's 'sparse' runner is not mapped",
    'sparse/cls/resnet/res18_ampere_sparse.yaml': "runtime.runner.type: UP's 'sparse' runner is not mapped",
    'sparse/det/faster_rcnn/faster_rcnn_r50_fpn_amba_sparse.yaml': "runtime.runner.type: UP's 'sparse' runner is not mapped",
    'sparse/det/faster_rcnn/faster_rcnn_r50_fpn_ampere_sparse.yaml': "runtime.runner.type: UP's 'sparse' runner is not mapped",
    'sparse/det/retinanet/retinanet-r18-improve_amba_sparse.yaml': "runtime.runner.type: UP's 'sparse' runner is not mapped",
    'sparse/det/retinanet/retinanet-r18-improve_ampere_sparse.yaml': "runtime.runner.type: UP's 'sparse' runner is not mapped",
    # -- ssl --
    'ssl/mae/mae_vit_base_patch16_dec512d8b.yaml': "net[0].wrappers: UP's module wrappers",
    'ssl/mae/mae_vit_base_patch16_dec512d8b_800e.yaml': "net[0].wrappers: UP's module wrappers",
    'ssl/mae/mae_vit_base_patch16_dec512d8b_finetune.yaml': 'net[1].kwargs.cls_type: expected token or gap',
    'ssl/mae/mae_vit_base_patch16_dec512d8b_linear.yaml': "net[0].type: self is UP's whole-model options",
    'ssl/mocov1/moco_v1.yaml': "net[0].wrappers: UP's module wrappers",
    'ssl/mocov1/moco_v1_imagenet_linear.yaml': "net[0].type: self is UP's whole-model options",
    'ssl/mocov2/moco_v2.yaml': "net[0].wrappers: UP's module wrappers",
    'ssl/mocov2/moco_v2_imagenet_linear.yaml': "net[0].type: self is UP's whole-model options",
    'ssl/mocov3/moco_v3.yaml': "net[0].wrappers: UP's module wrappers",
    'ssl/simclrv1/simclr_v1.yaml': "net[0].wrappers: UP's module wrappers",
    'ssl/simclrv2/simclr_v2.yaml': "net[0].wrappers: UP's module wrappers",
    'ssl/simsiam/simsiam_100e.yaml': "net[0].wrappers: UP's module wrappers",
    'ssl/simsiam/simsiam_linear.yaml': "net[0].type: self is UP's whole-model options",
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
