"""UP classification files given (by --opts or an edit) what the new mappings cannot honour: a
ConvNeXt or CSWin kwarg out of range, a torch_cutmix_mixup that is not last in the training
pipeline, a representation_size that is not a positive integer. ``up config`` stops each in
one line naming the key (exit 2)."""
import os

import pytest

from conftest import UP_FIXTURES, invoke
from hostile_helpers import assert_one_line

CLS = os.path.join(UP_FIXTURES, "cls")


def config(rel, *opts):
    return invoke(["config", "--config", os.path.join(CLS, rel), "--opts", *opts])


def cutmix_first(tmp_path):
    """res50_car_strikes.yaml with its cutmix_mixup alias moved to the front of the pipeline."""
    with open(os.path.join(CLS, "resnet", "downstream", "res50_car_strikes.yaml"), encoding="utf-8") as f:
        text = f.read()
    old = "[*random_resized_crop,"
    assert old in text
    text = text.replace("*normalize, *cutmix_mixup]", "*normalize]")
    text = text.replace(old, "[*cutmix_mixup, *random_resized_crop,")
    path = tmp_path / "res50_car_strikes.yaml"
    path.write_text(text)
    return invoke(["config", "--config", path])


@pytest.mark.parametrize("rel, change, fragments", [
    ("convnext/convnext_t.yaml", "net.0.kwargs.drop_path_rate=1.5",
     ["net[0].kwargs.drop_path_rate: must be in [0, 1)"]),
    ("convnext/convnext_t.yaml", "net.0.kwargs.act_func=swish", ["net[0].kwargs.act_func: expected one of gelu"]),
    ("convnext/convnext_t.yaml", "net.1.kwargs.head_init_scale=[1]",
     ["net[1].kwargs.head_init_scale: expected a number"]),
    ("cswin/cswin_tiny.yaml", "net.0.kwargs.use_chk=true", ["net[0].kwargs.use_chk", "memory_checkpoint"]),
    ("cswin/cswin_tiny.yaml", "net.0.kwargs.out_indices=[3]", ["net[0].kwargs.out_indices: only [0, 1, 2, 3]"]),
    ("cswin/cswin_tiny.yaml", "net.0.kwargs.embed_dim=32", ["net[0].kwargs.embed_dim: UP kwarg not supported"]),
    ("resnet/res50_strikes_100e_bce.yaml", "net.1.kwargs.representation_size=0",
     ["net[1].kwargs.representation_size: must be > 0"]),
    ("resnet/res50_strikes_100e_bce.yaml", "net.1.kwargs.representation_size='768'",
     ["net[1].kwargs.representation_size: expected an integer or null"]),
])
def test_edited_up_cls_file_stops_in_one_line(rel, change, fragments):
    assert_one_line(config(rel, change), *fragments)


def test_cutmix_mixup_not_last_stops_in_one_line(tmp_path):
    assert_one_line(cutmix_first(tmp_path), "dataset.train.kwargs.transformer[0].type: torch_cutmix_mixup",
                    "must be the last transform")
