"""Training with a ``sparsity`` section on digits: the masked layers are exactly 2:4 (50 %) in
the saved checkpoints and after every optimizer step, the sparse checkpoint evaluates to the
metric training reported, levels rise on schedule, and a resume is bitwise equal to a straight
run with the masks restored from the checkpoint."""
import json
import os

import torch

from conftest import REPO, invoke
from hostile_helpers import tiny_cfg
from optim_helpers import resolved
from test_train_e2e import assert_state_equal, load, train
from up_trainer.engine.builder import build_trainer
from up_trainer.engine.hooks import Hook
from up_trainer.sparsity.masks import is_semi_structured

DEMO = os.path.join(REPO, "configs", "cls", "digits_resnet18_sparse.yaml")
SEMI = {"scheduler": "semi_structured"}


def masked_layers(ckpt):
    masks = ckpt["hooks"]["sparsity"]["masks"]
    return {name: (ckpt["model"][f"{name}.weight"], mask) for name, mask in masks.items()}


def test_demo_config_is_exactly_2_4_in_its_checkpoint_and_evaluates_to_its_metric(tmp_path, run_up):
    run_dir = tmp_path / "demo"
    res = run_up(["train", "--config", DEMO, "--work-dir", run_dir, "--opts", "trainer.max_epoch=2",
                  "sparsity.start_epoch=2", "dataset.train.kwargs.subset=96", "dataset.test.kwargs.subset=48",
                  "default_hooks.logger=null"])
    assert res.exit_code == 0, (res.stderr, res.stdout[-2000:])
    e1, e2 = load(run_dir / "checkpoints" / "ckpt_e1.pth"), load(run_dir / "checkpoints" / "ckpt_e2.pth")
    assert e1["hooks"]["sparsity"]["masks"] is None  # dense before start_epoch
    layers = masked_layers(e2)
    assert len(layers) == 20  # every conv and the classifier; the 1-channel stem does not split into 4s
    assert "backbone.conv1" not in layers and "fc" in "".join(layers)
    zeros = sum(int((w == 0).sum()) for w, _ in layers.values())
    total = sum(w.numel() for w, _ in layers.values())
    assert zeros * 2 == total  # exactly 50 %
    for name, (weight, mask) in layers.items():
        assert torch.equal(weight != 0, mask) and is_semi_structured(mask, 4, 2), name
    top1 = e2["state"]["metrics"]["top1"]
    ev = run_up(["eval", "--config", DEMO, "--checkpoint", run_dir / "checkpoints" / "ckpt_e2.pth", "--opts",
                 "dataset.test.kwargs.subset=48"])
    assert ev.exit_code == 0, ev.stderr
    line = next(x for x in ev.stdout.splitlines() if " I metrics: " in x)
    assert json.loads(line.split(" I metrics: ", 1)[1])["top1"] == top1  # the saved sparse weights are the model


class WeightsAfterEveryStep(Hook):
    """Records, after every optimizer update, whether each masked weight is zero where its mask is."""
    priority = "LOWEST"

    def __init__(self):
        super().__init__()
        self.checks = []

    def after_update(self, trainer, iteration):
        hook = trainer.hooks.get("sparsity")
        if hook.masks is not None:
            self.checks.append(all(not bool(m.weight[~hook.masks[n]].any()) for n, m in hook.layers()))


def run_in_process(cfg, work_dir):
    trainer = build_trainer(resolved(cfg), work_dir=str(work_dir), device="cpu")
    probe = trainer.hooks.add(WeightsAfterEveryStep(), name="probe")
    trainer.train()
    return trainer, probe


def test_weights_stay_sparse_after_every_step_and_gradients_are_masked(tmp_path):
    cfg = tiny_cfg(sparsity=SEMI, trainer={"max_epoch": 2, "optimizer": {
        "type": "AdamW", "kwargs": {"lr": 0.01, "weight_decay": 0.1}}})
    trainer, probe = run_in_process(cfg, tmp_path)
    assert len(probe.checks) == trainer.state.iter and all(probe.checks)
    hook = trainer.hooks.get("sparsity")
    for name, module in hook.layers():  # Adam's moments never grew where the weight is masked
        state = trainer.optim.optimizer.state[module.weight]
        assert not state["exp_avg"][~hook.masks[name]].any()


def test_levels_rise_through_the_run_and_each_stage_is_exact(tmp_path):
    cfg = tiny_cfg(sparsity={"scheduler": "levels", "levels": [0.25, 0.5, 0.75]},
                   trainer={"max_epoch": 3, "save_freq": 1})
    run_dir, _ = train(invoke, tmp_path, "levels", cfg)
    for epoch, level in ((1, 0.25), (2, 0.5), (3, 0.75)):  # 2 iterations an epoch: stages from iterations 1, 3, 5
        ckpt = load(run_dir / "checkpoints" / f"ckpt_e{epoch}.pth")
        assert ckpt["hooks"]["sparsity"]["stage"] == epoch - 1
        for name, (weight, mask) in masked_layers(ckpt).items():
            assert int((~mask).sum()) == round(level * mask.numel()), (epoch, name)
            assert not weight[~mask].any()


def test_resume_restores_the_masks_and_is_bitwise_equal_to_a_straight_run(tmp_path, run_up):
    """The straight run's own epoch-2 checkpoint resumed in another run dir (a levels schedule
    depends on the run's length, so the interrupted run has the same config)."""
    for name, sparsity in (("semi", SEMI), ("levels", {"scheduler": "levels", "levels": [0.3, 0.6]})):
        cfg = tiny_cfg(sparsity=sparsity, trainer={"max_epoch": 4, "lr_scheduler": {
            "type": "StepLR", "kwargs": {"step_size": 3}}})
        straight, _ = train(run_up, tmp_path, f"{name}_straight", cfg)
        resumed, res = train(run_up, tmp_path, f"{name}_resumed", cfg, "--resume",
                             straight / "checkpoints" / "ckpt_e2.pth")
        assert "resumed from" in res.stdout and "masks computed" not in res.stdout
        a, b = load(straight / "checkpoints" / "ckpt_e4.pth"), load(resumed / "checkpoints" / "ckpt_e4.pth")
        for key in ("model", "optimizer", "lr_scheduler", "hooks"):
            assert_state_equal(a[key], b[key])
