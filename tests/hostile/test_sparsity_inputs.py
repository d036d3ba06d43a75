"""Hostile input to sparsity: bad values in the native ``sparsity`` section and in UP's sparse
runner section, and resume checkpoints whose masks do not fit. Each stops in one line naming
the key or the file (exit 2), never a traceback, and no checkpoint is lost."""
import copy
import os

import pytest
import torch
import yaml

from conftest import UP_FIXTURES, invoke
from hostile_helpers import assert_one_line, fingerprint, tiny_cfg, write_yaml

SEMI = {"scheduler": "semi_structured"}


@pytest.mark.parametrize("sparsity, fragments", [
    ("2:4", ["sparsity: expected dict, got str"]),
    ({"scheduler": "ampere"}, ["sparsity.scheduler: unknown scheduler 'ampere'", "semi_structured"]),
    ({"scheduler": ["levels"]}, ["sparsity.scheduler: unknown scheduler"]),
    ({"scheduler": "semi_structured", "block_size": "4"}, ["sparsity.block_size: expected int, got str"]),
    ({"scheduler": "semi_structured", "block_size": True}, ["sparsity.block_size: expected int, got bool"]),
    ({"scheduler": "semi_structured", "zeros_per_block": 4}, ["sparsity.zeros_per_block: 4 zeros leave nothing"]),
    ({"scheduler": "semi_structured", "levels": [0.5]}, ["sparsity.levels: is read by scheduler levels only"]),
    ({"scheduler": "levels"}, ["sparsity.levels: required key is missing"]),
    ({"scheduler": "levels", "levels": [0.5, 0.3]}, ["sparsity.levels[1]: 0.3 is below the level before it"]),
    ({"scheduler": "levels", "levels": [1.5]}, ["sparsity.levels[0]: expected a fraction in (0, 1)"]),
    ({"scheduler": "levels", "levels": "0.5"}, ["sparsity.levels: expected a non-empty list"]),
    ({"scheduler": "levels", "levels": [0.5], "block_size": 4}, ["sparsity.block_size: is read by scheduler"]),
    ({"scheduler": "semi_structured", "start_epoch": 0}, ["sparsity.start_epoch: must be >= 1"]),
    ({"scheduler": "semi_structured", "exclude": "fc"}, ["sparsity.exclude: expected a list"]),
    ({"scheduler": "semi_structured", "skip_depthwise": "yes"}, ["sparsity.skip_depthwise: expected bool"]),
    ({"scheduler": "semi_structured", "mask_calculator": "m4n2_1d"}, ["sparsity.mask_calculator: unknown key"]),
    ({"scheduler": "semi_structured", "exclude": ["backbone"]}, ["sparsity: no layer of this net is masked"]),
])
def test_bad_native_sparsity_values_are_one_line(tmp_path, sparsity, fragments):
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(sparsity=sparsity))
    for command in (["config", "--config", cfg], ["train", "--config", cfg, "--work-dir", tmp_path / "run"]):
        assert_one_line(invoke(command), *fragments)
    assert not fingerprint(tmp_path / "run" / "checkpoints")


def test_sparsity_with_an_ema_hook_is_one_line(tmp_path):
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(sparsity=SEMI, hooks=[{"type": "ema"}]))
    assert_one_line(invoke(["config", "--config", cfg]), "sparsity: an ema hook averages the weights")


def up_variant(tmp_path, rel, edit):
    with open(os.path.join(UP_FIXTURES, "sparse", rel), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    edit(cfg["sparsity"])
    return write_yaml(tmp_path / "up.yaml", cfg)


AMPERE = "det/retinanet/retinanet-r18-improve_ampere_sparse.yaml"
AMBA = "det/retinanet/retinanet-r18-improve_amba_sparse.yaml"


@pytest.mark.parametrize("rel, edit, fragments", [
    (AMPERE, lambda s: s["scheduler"].update(type="NvScheduler"), ["sparsity.scheduler.type: UP's NvScheduler"]),
    (AMPERE, lambda s: s["scheduler"]["kwargs"].update(mask_calculator="m4n2_2d_greedy"),
     ["sparsity.scheduler.kwargs.mask_calculator: 'm4n2_2d_greedy' is not mapped", "m4n2_1d"]),
    (AMPERE, lambda s: s["scheduler"]["kwargs"].update(mask_calculator=42),
     ["sparsity.scheduler.kwargs.mask_calculator: 42 is not mapped"]),
    (AMPERE, lambda s: s["scheduler"]["kwargs"].update(allow_permutation="no"),
     ["sparsity.scheduler.kwargs.allow_permutation: expected bool, got str"]),
    (AMPERE, lambda s: s["scheduler"]["kwargs"].update(verbosity=9), ["sparsity.scheduler.kwargs.verbosity"]),
    (AMPERE, lambda s: s["scheduler"].update(kwargs=[1]), ["sparsity.scheduler.kwargs: expected a mapping"]),
    (AMPERE, lambda s: s.update(scheduler="AmpereScheduler"), ["sparsity.scheduler: expected {type"]),
    (AMPERE, lambda s: s.update(prune_all=True), ["sparsity.prune_all: is not read by UP's sparse runner"]),
    (AMBA, lambda s: s["scheduler"]["kwargs"].update(sparsity_table="30,50"),
     ["sparsity.scheduler.kwargs.sparsity_table: expected a list of percentages"]),
    (AMBA, lambda s: s["scheduler"]["kwargs"].update(prun_algo="1"), ["sparsity.scheduler.kwargs.prun_algo"]),
    (AMBA, lambda s: s["fake_sparse"].update(type="QuantFakeSparse"), ["sparsity.fake_sparse.type"]),
])
def test_bad_up_sparsity_values_are_one_line(tmp_path, rel, edit, fragments):
    assert_one_line(invoke(["config", "--config", up_variant(tmp_path, rel, edit)]), *fragments)


def test_up_sparse_runner_without_a_section_is_one_line(tmp_path):
    with open(os.path.join(UP_FIXTURES, "sparse", AMPERE), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    del cfg["sparsity"]
    assert_one_line(invoke(["config", "--config", write_yaml(tmp_path / "up.yaml", cfg)]),
                    "sparsity: runtime.runner sparse needs a sparsity section")


# -- resume checkpoints whose masks do not fit ---------------------------------------------------
@pytest.fixture(scope="module")
def sparse_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("sparse_run")
    cfg = write_yaml(work / "cfg.yaml", tiny_cfg(sparsity=SEMI))
    res = invoke(["train", "--config", cfg, "--work-dir", work])
    assert res.exit_code == 0, res.stderr
    return torch.load(work / "checkpoints" / "ckpt_e1.pth", weights_only=True)


def flip_group(mask):
    mask = mask.clone()
    mask.view(-1)[:4] = torch.tensor([True, True, True, False])  # 3 of 4 kept
    return mask


@pytest.mark.parametrize("edit, sparsity, fragments", [
    (lambda s: s["masks"].pop(next(iter(s["masks"]))), SEMI, ["no mask for layer"]),
    (lambda s: s["masks"].update({"backbone.9": torch.ones(2, 2, dtype=torch.bool)}), SEMI, ["a mask for 'backbone.9'"]),
    (lambda s: s["masks"].update({k: v[:, :4] for k, v in s["masks"].items()}), SEMI, ["the mask of", "the weight"]),
    (lambda s: s["masks"].update({k: v.float() for k, v in s["masks"].items()}), SEMI, ["the mask of"]),
    (lambda s: s["masks"].update({k: flip_group(v) for k, v in s["masks"].items()}), SEMI,
     ["is not 2:4 along the input dimension"]),
    (lambda s: s["masks"].update({k: torch.ones_like(v) for k, v in s["masks"].items()}), SEMI, ["is not 2:4"]),
    (lambda s: s.update(masks="all"), SEMI, ["not a mapping"]),
    (lambda s: None, {"scheduler": "levels", "levels": [0.5]}, ["made by scheduler 'semi_structured'"]),
    (lambda s: None, {"scheduler": "semi_structured", "block_size": 4, "zeros_per_block": 3}, ["is not 1:4"]),
])
def test_resume_with_masks_that_do_not_fit_is_one_line(tmp_path, sparse_run, edit, sparsity, fragments):
    ckpt = copy.deepcopy(sparse_run)
    edit(ckpt["hooks"]["sparsity"])
    save_dir = tmp_path / "run" / "checkpoints"
    os.makedirs(save_dir)
    torch.save(ckpt, save_dir / "ckpt_e1.pth")
    before = fingerprint(save_dir)
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(sparsity=sparsity, trainer={"max_epoch": 2}))
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run", "--resume", save_dir / "ckpt_e1.pth"])
    assert_one_line(res, "ckpt_e1.pth", "hooks.sparsity", *fragments)
    assert fingerprint(save_dir) == before


def test_resume_whose_weights_are_not_zero_under_the_masks_is_one_line(tmp_path, sparse_run):
    ckpt = copy.deepcopy(sparse_run)
    name = next(iter(ckpt["hooks"]["sparsity"]["masks"]))
    ckpt["model"][f"{name}.weight"].fill_(1.0)
    path = tmp_path / "ckpt_e1.pth"
    torch.save(ckpt, path)
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(sparsity=SEMI, trainer={"max_epoch": 2}))
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run", "--resume", path])
    assert_one_line(res, "hooks.sparsity", f"the weight of {name!r} is not zero where its mask is")
