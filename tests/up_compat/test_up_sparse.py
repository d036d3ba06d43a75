"""UP's sparse files (tests/fixtures/up/sparse, unchanged): ``runtime.runner: sparse`` and the
``sparsity`` section translated onto the native section, each MSBench key mapped, mapped with
its deviation noted, or refused by name; a RetinaNet file dry-runs on tiny digit scenes."""
import copy
import os

import pytest
import torch
import yaml

from conftest import UP_FIXTURES, invoke
from test_up_configs import data_opts, one_error_line, up_data  # noqa: F401  (up_data: a fixture)
from up_trainer.config.up_sparse import translate_sparse
from up_trainer.errors import ConfigError
from up_trainer.sparsity.masks import maskable_layers
from up_trainer.sparsity.spec import read_sparsity

SPARSE = os.path.join(UP_FIXTURES, "sparse")


def up_file(rel):
    with open(os.path.join(SPARSE, rel), encoding="utf-8") as f:
        return yaml.safe_load(f)


def translated(rel, **kwargs):
    cfg = up_file(rel)
    cfg["sparsity"]["scheduler"].setdefault("kwargs", {}).update(kwargs)
    notes = []
    assert translate_sparse(cfg, "sparse", notes) is None
    return cfg, notes


def test_ampere_file_becomes_2_4_semi_structured():
    cfg, notes = translated("det/retinanet/retinanet-r18-improve_ampere_sparse.yaml")
    assert cfg["sparsity"] == {"scheduler": "semi_structured", "block_size": 4, "zeros_per_block": 2,
                               "verbose": False}
    assert read_sparsity(cfg["sparsity"]).describe().startswith("2:4 semi-structured")


def test_ampere_mask_calculator_names_the_pattern():
    cfg, _ = translated("cls/resnet/res18_ampere_sparse.yaml", mask_calculator="m8n4_1d", verbosity=2)
    assert (cfg["sparsity"]["block_size"], cfg["sparsity"]["zeros_per_block"], cfg["sparsity"]["verbose"]) == (8, 4, True)


def test_amba_file_becomes_levels_with_its_deviations_noted():
    cfg, notes = translated("cls/resnet/res18_amba_sparse.yaml")
    assert cfg["sparsity"]["scheduler"] == "levels"
    assert cfg["sparsity"]["levels"] == [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    text = "\n".join(notes)
    assert "prun_algo: 1" in text and "restarts the LR schedule" in text and "output_dir: not written" in text
    assert cfg["net"][1]["type"] == "base_cls_head"  # UP's sparse_base_cls_head


def test_amba_no_prune_names_become_exclude():
    cfg, _ = translated("det/retinanet/retinanet-r18-improve_amba_sparse.yaml",
                        no_prune_keyword="backbone.conv1,head", no_prune_layer="", dw_no_prune=True, prun_algo=0)
    assert cfg["sparsity"]["exclude"] == ["backbone.conv1", "head"] and cfg["sparsity"]["skip_depthwise"] is True


@pytest.mark.parametrize("kwargs, where", [
    ({"allow_permutation": True}, "allow_permutation"),
    ({"mask_calculator": "m4n2_2d_best"}, "mask_calculator"),
    ({"mask_calculator": "m4n4_1d"}, "mask_calculator"),
    ({"verbosity": "loud"}, "verbosity"),
    ({"whitelist": ["Linear"]}, "whitelist"),
])
def test_ampere_kwargs_refused_by_name(kwargs, where):
    with pytest.raises(ConfigError, match=rf"sparsity\.scheduler\.kwargs\.{where}"):
        translated("cls/resnet/res18_ampere_sparse.yaml", **kwargs)


@pytest.mark.parametrize("kwargs, where", [
    ({"do_sparse_analysis": True}, "do_sparse_analysis"),
    ({"prun_algo": 2}, "prun_algo"),
    ({"prun_hw_aware": "cv22"}, "prun_hw_aware"),
    ({"sparsity_table": [30, 150]}, "sparsity_table"),
    ({"no_prune_layer": ["conv1"]}, "no_prune_layer"),
])
def test_amba_kwargs_refused_by_name(kwargs, where):
    with pytest.raises(ConfigError, match=rf"sparsity\.scheduler\.kwargs\.{where}"):
        translated("cls/resnet/res18_amba_sparse.yaml", **kwargs)


def test_other_msbench_schedulers_and_masks_refused_by_name():
    cfg = up_file("cls/resnet/res18_amba_sparse.yaml")
    bad = copy.deepcopy(cfg)
    bad["sparsity"]["scheduler"]["type"] = "STRScheduler"
    with pytest.raises(ConfigError, match=r"sparsity\.scheduler\.type: UP's STRScheduler \(MSBench's soft-threshold"):
        translate_sparse(bad, "sparse", [])
    bad = copy.deepcopy(cfg)
    bad["sparsity"]["mask_generator"]["type"] = "ProbMaskGenerator"
    with pytest.raises(ConfigError, match=r"sparsity\.mask_generator\.type"):
        translate_sparse(bad, "sparse", [])


def test_sparsity_under_another_runner_is_dropped_as_in_up():
    cfg, notes = up_file("cls/resnet/res18_amba_sparse.yaml"), []
    assert translate_sparse(cfg, "base", notes) == "base"
    assert "sparsity" not in cfg and "only runtime.runner: sparse reads it" in notes[-1]


@pytest.mark.parametrize("rel", ["det/faster_rcnn/faster_rcnn_r50_fpn_ampere_sparse.yaml",
                                 "det/retinanet/retinanet-r18-improve_amba_sparse.yaml"])
def test_detection_files_mask_backbone_neck_and_heads(rel):
    """On the net `up config` builds (meta device), the masks reach every detector part."""
    from up_trainer.config import resolve_config
    from up_trainer.tasks.net import build_model

    cfg = resolve_config(os.path.join(SPARSE, rel))
    with torch.device("meta"):
        model = build_model(cfg["net"])
    names = [name for name, _ in maskable_layers(model, read_sparsity(cfg["sparsity"]))]
    parts = {name.split(".")[0] for name in names}
    assert len(names) > 20 and len(parts) >= 3, parts


def test_retinanet_sparse_file_dry_runs_with_data_opts(up_data, tmp_path):  # noqa: F811
    rel = "sparse/det/retinanet/retinanet-r18-improve_ampere_sparse.yaml"
    res = invoke(["train", "--config", os.path.join(UP_FIXTURES, rel), "--work-dir", tmp_path / "run", "--dry-run",
                  "--device", "cpu", "--opts", *data_opts(rel, up_data)])
    assert res.exit_code == 0, res.stderr or res.exception
    log = (tmp_path / "run" / "train.log").read_text()
    assert "dry run: train iteration 2/2" in log and "dry run: ok" in log
    assert "sparsity(30)" in log  # the hook built into the run's hook order


def test_evaluator_num_classes_is_refused_as_up_refuses_it():
    res = invoke(["config", "--config", os.path.join(SPARSE, "cls/resnet/res18_ampere_sparse.yaml")])
    assert res.exit_code == 2 and one_error_line(res)
    assert "dataset.evaluator.kwargs.num_classes: unknown argument" in res.stderr
