"""UP's BigNAS RegNet classification files (tests/fixtures/up/nas/bignas/cls): the supernet
(``big_regnet`` + ``BigClsHead``) trains by the sandwich rule on UP's cls data form, ``up flops``
lists sampled subnets within ``flops_range``, and a sampled subnet built on its own (the
supernet file with every element fixed to the subnet's values) computes, from the sliced
supernet checkpoint, what the supernet computes with that subnet active."""
import copy
import os
import random

import pytest
import torch

from conftest import UP_FIXTURES, invoke
from test_up_configs import data_opts, up_data  # noqa: F401  (the module's tiny digit images)
from up_trainer.config import resolve_loaded
from up_trainer.config.loader import load_file
from up_trainer.engine.builder import load_pretrained
from up_trainer.tasks.up_nets import build_up_net

CLS = "nas/bignas/cls"
SUPNET = f"{CLS}/bignas_regnet_800m_train_supnet.yaml"
FLOPS = os.path.join(UP_FIXTURES, CLS, "bignas_regnet_800m_sample_flops.yaml")


def _model(raw, tmp_path):
    cfg = resolve_loaded(copy.deepcopy(raw), source_path=str(tmp_path / "cfg.yaml"))
    return build_up_net(cfg["net"])


def _randomized(model):
    """Every tensor drawn anew, so that slices are told apart: small signed values, running
    variances in [0.5, 1.5) (the logits stay finite through the 20 blocks)."""
    def draw(key, v):
        if not v.dim() or not v.is_floating_point():
            return v
        return torch.rand_like(v) + 0.5 if key.endswith("running_var") else (torch.rand_like(v) - 0.5) * 0.4
    return {k: draw(k, v) for k, v in model.state_dict().items()}


def test_supernet_file_dry_runs_on_digits(up_data, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    res = invoke(["train", "--config", os.path.join(UP_FIXTURES, SUPNET), "--work-dir", str(run_dir), "--dry-run",
                  "--device", "cpu", "--opts", *data_opts(SUPNET, up_data)])
    assert res.exit_code == 0, res.stderr or res.exception
    log = (run_dir / "train.log").read_text()
    assert "dry run: train iteration 2/2" in log and "dry run: ok" in log


def test_sandwich_rule_draws_from_the_step(tmp_path):
    model = _model(load_file(os.path.join(UP_FIXTURES, SUPNET)), tmp_path)
    assert type(model).__name__ == "BigNASClassifier"
    batch = {"image": torch.rand(2, 3, 32, 32), "label": torch.tensor([1, 7])}
    model.train()
    seen = []
    for _ in range(4):
        out = model(batch)
        out["loss"].backward()
        seen.append(model.subnet)
    assert [mode for mode, _ in seen] == ["max", "random", "random", "min"] and int(model.bignas_step) == 4
    space = model.space
    assert seen[0][1]["backbone"]["out_channel"] == [32, 80, 160, 320, 768]
    assert seen[3][1]["backbone"]["depth"] == [1, 1, 2, 5, 4]
    for _, setting in seen[1:3]:  # each drawn value inside its stage's space
        for name, values in setting["backbone"].items():
            assert all(v in allowed for v, allowed in zip(values, space[name][0])), (name, values)
    assert seen[1][1] != seen[2][1]
    # inactive weights get a zero gradient: every trainable parameter took part
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    model.bignas_step.fill_(2)  # as a resumed run: the same step draws the same subnet
    model(batch)
    assert model.subnet == seen[2]
    model.eval()
    with torch.no_grad():
        logits = model({"image": torch.rand(2, 3, 32, 32)})["logits"]
    assert logits.shape == (2, 1000) and model.subnet[0] == "max"


def test_sampled_subnet_computes_what_the_supernet_computes(tmp_path):
    raw = load_file(os.path.join(UP_FIXTURES, SUPNET))
    supernet = _model(raw, tmp_path)
    supernet.load_state_dict(_randomized(supernet))
    setting = supernet.set_subnet("random", random.Random(7))["backbone"]
    assert setting != supernet.set_subnet("max")["backbone"]
    setting = supernet.set_subnet("random", random.Random(7))["backbone"]
    path = tmp_path / "supernet.pth"
    torch.save({"model": supernet.state_dict()}, path)

    fixed = copy.deepcopy(raw)
    fixed["net"][0]["kwargs"].update(setting)  # every element a fixed list: the subnet alone
    fixed["net"][1]["kwargs"]["in_plane"] = setting["out_channel"][-1]
    subnet = _model(fixed, tmp_path)
    assert sum(p.numel() for p in subnet.parameters()) < sum(p.numel() for p in supernet.parameters())
    report = load_pretrained(subnet, str(path))
    assert not report["missing"] and not report["mismatched"] and not report["unexpected"], report
    supernet.eval(), subnet.eval()
    supernet.hold_subnet = True
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        theirs = supernet({"image": x})["logits"]
        mine = subnet({"image": x})["logits"]
    assert torch.isfinite(mine).all() and mine.abs().max() > 1e-3
    assert torch.allclose(theirs, mine, rtol=1e-4, atol=1e-5 * mine.abs().max()), (theirs - mine).abs().max()
    supernet.hold_subnet = False
    with torch.no_grad():  # the largest subnet differs: the slice is not the whole net
        assert not torch.allclose(supernet({"image": x})["logits"], mine, atol=1e-3)


def test_up_flops_lists_sampled_subnets_within_the_range():
    res = invoke(["flops", "--config", FLOPS, "--input-size", "3,32,32", "--opts", "bignas.subnet.subnet_count=3",
                  "bignas.subnet.flops_range=['12M','20M']"])
    assert res.exit_code == 0, res.stderr or res.exception
    lines = res.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("sampled subnets"))
    assert "within 12.00M..20.00M" in lines[head]
    rows = lines[head + 1:]
    assert 1 <= len(rows) <= 3
    values = [float(r.split()[0][:-1]) for r in rows]
    assert values == sorted(values) and all(12 <= v <= 20 for v in values), rows
    assert all('"backbone": {"depth": [1, 1, ' in r and '"group_width": [16, 16, 16, 16, 16]' in r for r in rows)


@pytest.mark.slow
def test_supernet_trains_an_epoch_and_saves_its_step(up_data, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    res = invoke(["train", "--config", os.path.join(UP_FIXTURES, SUPNET), "--work-dir", str(run_dir), "--device",
                  "cpu", "--opts", *data_opts(SUPNET, up_data), "trainer.max_epoch=1",
                  "trainer.lr_scheduler.warmup_epochs=0", "dataset.train.dataloader.kwargs.num_workers=0",
                  "dataset.test.dataloader.kwargs.num_workers=0"])
    assert res.exit_code == 0, res.stderr or res.exception
    ckpt = sorted(run_dir.rglob("ckpt_e*.pth"))[-1]
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["model"]
    assert int(state["bignas_step"]) == 6  # 12 digit images, batch 2: one subnet per iteration
