"""memory_checkpoint configured in YAML and run by the real trainer through the CLI."""
import pytest
import torch

from conftest import tiny_cfg, write_cfg


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_checkpointed_training_ends_with_the_same_weights(tmp_path, run_up, mode):
    kwargs = {"checkpoint_patterns": {"backbone": {"patterns_mode": "level", "level": {"num": 2}}}}
    if mode == "dynamic":
        kwargs["dc_cfg"] = {"warmup_iters": 3, "max_memory": 0.0005, "debug_freq": 2, "strategy": "greedy"}
    runs = {}
    for name, hooks in (("plain", []), ("ckpt", [{"type": "memory_checkpoint", "kwargs": kwargs}])):
        cfg = tiny_cfg(trainer={"max_epoch": 1}, hooks=hooks, default_hooks={"best": None})
        run_dir = tmp_path / name
        res = run_up(["train", "--config", write_cfg(tmp_path / f"{name}.yaml", cfg), "--work-dir", run_dir])
        assert res.exit_code == 0, (res.stderr, res.exception)
        runs[name] = (torch.load(run_dir / "checkpoints" / "ckpt_e1.pth", weights_only=True), res.stdout)
    plain, ckpt = runs["plain"][0], runs["ckpt"][0]
    assert f"memory_checkpoint: {mode} mode" in runs["ckpt"][1]
    for k, v in plain["model"].items():
        assert torch.equal(v, ckpt["model"][k]), k
    assert "memory_checkpoint" in ckpt["hooks"]
