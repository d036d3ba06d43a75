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
    # -- nas --
    'nas/retinanet-xmnet.yaml': "net[0].type: xmnet_search is UP's XMNet backbone decoded from a searched cell code",
    # -- quant --
    'quant/det/faster_rcnn/faster_rcnn_r18_FPN_2x_quant_qdrop.yaml': "net[2].kwargs.class_activation: 'softmax' is not supported for UP's NaiveRPN",
    # -- sparse --
    # UP's own ImageNetEvaluator takes no num_classes either (UP stops there with a TypeError)
    'sparse/cls/resnet/res18_ampere_sparse.yaml': "dataset.evaluator.kwargs.num_classes: unknown argument",
    # -- ssl --
}


def test_the_census_covers_every_file_of_these_folders():
    assert len(FILES) == 46
    assert set(REFUSED) <= set(FILES)
    assert len(FILES) - len(REFUSED) >= 40  # the files that run unchanged (each checked below)


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
