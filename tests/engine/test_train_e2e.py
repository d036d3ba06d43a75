"""End to end on tiny digits subsets: files on disk, exact resume, crash safety, eval."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import REPO, SUBPROCESS_PATH, tiny_cfg, write_cfg


def train(run_up, tmp_path, name, cfg, *extra):
    run_dir = tmp_path / name
    path = write_cfg(tmp_path / f"{name}.yaml", cfg)
    res = run_up(["train", "--config", path, "--work-dir", run_dir, *extra])
    assert res.exit_code == 0, (res.stderr, res.exception, res.stdout[-3000:])
    return run_dir, res


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_state_equal(a, b):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_state_equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_state_equal(x, y)
    else:
        assert a == b


def test_files_on_disk_follow_the_schedule(tmp_path, run_up):
    cfg = tiny_cfg(trainer={"max_epoch": 5, "save_freq": 2, "save_start": 1, "test_freq": 2})
    run_dir, res = train(run_up, tmp_path, "sched", cfg)
    files = sorted(f for f in os.listdir(run_dir / "checkpoints") if not f.startswith("."))
    assert files == ["ckpt_best.pth", "ckpt_e2.pth", "ckpt_e4.pth", "ckpt_e5.pth", "ckpt_latest.pth"]
    latest = load(run_dir / "checkpoints" / "ckpt_latest.pth")
    assert (latest["epoch"], latest["state"]["epoch_done"]) == (5, True)
    assert os.path.samefile(run_dir / "checkpoints" / "ckpt_latest.pth", run_dir / "checkpoints" / "ckpt_e5.pth")
    evals = [line for line in res.stdout.splitlines() if "eval epoch" in line]
    assert [int(line.split("eval epoch ")[1].split()[0]) for line in evals] == [2, 4, 5]
    assert (run_dir / "config.yaml").exists() and (run_dir / "train.log").exists()
    assert "# torch: " in (run_dir / "config.yaml").read_text()


def test_save_cur_writes_only_latest(tmp_path, run_up):
    cfg = tiny_cfg(trainer={"max_epoch": 3, "save_freq": 10, "save_cur_start": 1, "test_freq": 10},
                   default_hooks={"best": None})
    run_dir, _ = train(run_up, tmp_path, "cur", cfg)
    files = sorted(f for f in os.listdir(run_dir / "checkpoints") if not f.startswith("."))
    assert files == ["ckpt_e3.pth", "ckpt_latest.pth"]


def test_every_checkpoint_kind_loads_with_weights_only(tmp_path, run_up):
    run_dir, _ = train(run_up, tmp_path, "kinds", tiny_cfg())
    keys = {"model", "optimizer", "lr_scheduler", "scaler", "ema", "epoch", "iter", "hooks", "rng",
            "metric_val", "config"}
    for name in ("ckpt_e1.pth", "ckpt_e2.pth", "ckpt_latest.pth", "ckpt_best.pth"):
        ckpt = load(run_dir / "checkpoints" / name)
        assert keys <= set(ckpt), name
    best = load(run_dir / "checkpoints" / "ckpt_best.pth")
    assert best["metric_val"] == best["hooks"]["auto_save_best"]["best"]


def test_resume_is_bitwise_equal_to_straight_run(tmp_path, run_up):
    cfg = tiny_cfg(trainer={"max_epoch": 4, "lr_scheduler": {"type": "StepLR", "kwargs": {"step_size": 7}}})
    straight, _ = train(run_up, tmp_path, "straight", cfg)
    half_cfg = tiny_cfg(trainer={"max_epoch": 2, "lr_scheduler": {"type": "StepLR", "kwargs": {"step_size": 7}}})
    half, _ = train(run_up, tmp_path, "half", half_cfg)
    resumed, res = train(run_up, tmp_path, "half", cfg, "--resume", half / "checkpoints" / "ckpt_e2.pth")
    assert "resumed from" in res.stdout
    a = load(straight / "checkpoints" / "ckpt_e4.pth")
    b = load(resumed / "checkpoints" / "ckpt_e4.pth")
    assert_state_equal(a["model"], b["model"])
    assert_state_equal(a["optimizer"], b["optimizer"])
    assert_state_equal(a["lr_scheduler"], b["lr_scheduler"])
    assert a["iter"] == b["iter"] and a["metric_val"] == b["metric_val"]


def test_auto_resume_skips_a_corrupt_newest_checkpoint(tmp_path, run_up):
    cfg = tiny_cfg(trainer={"max_epoch": 3})
    run_dir, _ = train(run_up, tmp_path, "auto", tiny_cfg(trainer={"max_epoch": 2}))
    ckpts = run_dir / "checkpoints"
    os.unlink(ckpts / "ckpt_latest.pth")
    (ckpts / "ckpt_latest.pth").write_bytes(load_bytes(ckpts / "ckpt_e2.pth")[:1000])  # truncated, newest
    cfg["saver"] = {"save_dir": "checkpoints", "auto_resume": True}
    _, res = train(run_up, tmp_path, "auto", cfg)
    assert "auto_resume: skipping" in res.stdout and "truncated or corrupt" in res.stdout
    assert "resumed from" in res.stdout and "ckpt_e2.pth" in res.stdout
    assert load(ckpts / "ckpt_e3.pth")["epoch"] == 3


def load_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_pretrain_model_is_tolerant_and_reports_keys(tmp_path, run_up):
    run_dir, _ = train(run_up, tmp_path, "src", tiny_cfg(trainer={"max_epoch": 1}))
    cfg = tiny_cfg(trainer={"max_epoch": 1})
    cfg["net"]["kwargs"]["num_classes"] = 12  # head shape differs
    cfg["saver"] = {"save_dir": "checkpoints", "pretrain_model": str(run_dir / "checkpoints" / "ckpt_e1.pth")}
    cfg["dataset"]["train"]["kwargs"]["subset"] = 32
    _, res = train(run_up, tmp_path, "dst", cfg, "--opts", "default_hooks.best=null", "dataset.test=null")
    assert "shape-mismatched keys: backbone.fc.weight (10, 512) vs (12, 512)" in res.stdout


def test_evaluate_only_and_up_eval_write_metrics(tmp_path, run_up):
    run_dir, _ = train(run_up, tmp_path, "ev", tiny_cfg(trainer={"max_epoch": 1}))
    ckpt = run_dir / "checkpoints" / "ckpt_e1.pth"
    # up train itself leaves its final evaluation in results_dir, as the README says
    trained = json.loads((run_dir / "results_dir" / "metrics.json").read_text())
    assert trained["top1"] == load(ckpt)["state"]["metrics"]["top1"]
    assert len((run_dir / "results_dir" / "results.jsonl").read_text().splitlines()) == trained["num_samples"]
    shutil.rmtree(run_dir / "results_dir")
    path = write_cfg(tmp_path / "ev.yaml", tiny_cfg())
    res = run_up(["train", "--config", path, "--work-dir", run_dir, "-e", "--resume", ckpt])
    assert res.exit_code == 0, res.stderr
    metrics = json.loads((run_dir / "results_dir" / "metrics.json").read_text())
    assert metrics["top1"] == load(ckpt)["state"]["metrics"]["top1"]
    os.unlink(run_dir / "results_dir" / "metrics.json")
    res = run_up(["eval", "--config", path, "--work-dir", run_dir, "--checkpoint", ckpt])
    assert res.exit_code == 0, res.stderr
    again = json.loads((run_dir / "results_dir" / "metrics.json").read_text())
    assert again["top1"] == metrics["top1"]
    assert (run_dir / "results_dir" / "results.jsonl").exists()


def test_config_hooks_and_flops_commands(tmp_path, run_up):
    path = write_cfg(tmp_path / "c.yaml", tiny_cfg())
    res = run_up(["config", "--config", path, "--opts", "trainer.max_epoch=9"])
    assert res.exit_code == 0 and "max_epoch: 9" in res.stdout and "train_val_logger" in res.stdout
    res = run_up(["hooks"])
    assert res.exit_code == 0 and "auto_save_best  priority LOW (70)" in res.stdout
    res = run_up(["hooks", "auto_save_best"])
    assert "mode: 'max'" in res.stdout
    res = run_up(["flops", "--config", path])
    assert res.exit_code == 0, res.stderr
    assert "input: 1x1x8x8" in res.stdout and "backbone" in res.stdout


def test_hook_order_table_printed(tmp_path, run_up):
    cfg = tiny_cfg(trainer={"max_epoch": 1})
    cfg["hooks"] = [{"type": "auto_save_best", "priority": 5}]
    _, res = train(run_up, tmp_path, "order", cfg)
    line = next(x for x in res.stdout.splitlines() if x.strip().startswith("after_eval"))
    assert line.split()[1].startswith("auto_save_best(5)")


def test_sigkill_during_checkpoint_write_leaves_loadable_files(tmp_path):
    """A real subprocess is killed while a checkpoint write is half done; auto_resume finishes."""
    cfg = tiny_cfg(trainer={"max_epoch": 3})
    cfg["saver"] = {"save_dir": "checkpoints", "auto_resume": True}
    cfg_killed = dict(cfg, runtime={"seed": 3, "imports": ["slow_save_plugin"]})
    run_dir = tmp_path / "run"
    marker = tmp_path / "writing"
    env = dict(os.environ, PYTHONPATH=SUBPROCESS_PATH, UP_TEST_MARKER=str(marker),
               UP_TEST_STALL_AT="2")
    cmd = [sys.executable, "-m", "up_trainer", "train", "--work-dir", str(run_dir), "--config"]
    proc = subprocess.Popen(cmd + [write_cfg(tmp_path / "k.yaml", cfg_killed)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 400
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    ckpts = run_dir / "checkpoints"
    names = sorted(os.listdir(ckpts))
    assert any(n.startswith(".ckpt_e2.pth.tmp") for n in names)  # the write really was cut off
    for name in names:
        if name.startswith("ckpt_"):
            load(ckpts / name)
    assert not (ckpts / "ckpt_e2.pth").exists()
    done = subprocess.run(cmd + [write_cfg(tmp_path / "r.yaml", cfg)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "resumed from" in done.stdout
    assert not [n for n in os.listdir(ckpts) if ".tmp" in n]  # the dead writer's temp file is gone
    straight = subprocess.run(cmd[:-3] + ["--work-dir", str(tmp_path / "straight"), "--config",
                                          write_cfg(tmp_path / "s.yaml", cfg)],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
    assert straight.returncode == 0, straight.stderr
    assert_state_equal(load(ckpts / "ckpt_e3.pth")["model"],
                       load(tmp_path / "straight" / "checkpoints" / "ckpt_e3.pth")["model"])


@pytest.mark.parametrize("bad", ["empty", "foreign", "text"])
def test_bad_checkpoint_files_are_reported_in_one_line(tmp_path, bad):
    from up_trainer.engine.checkpoint import load_checkpoint
    from up_trainer.errors import CheckpointError

    p = tmp_path / "x.pth"
    if bad == "empty":
        p.write_bytes(b"")
    elif bad == "foreign":
        torch.save({"state_dict": {"w": torch.ones(1)}}, p)
    else:
        p.write_text("hello")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(str(p))
    assert "\n" not in str(info.value) and str(p) in str(info.value)


def test_pretrain_model_accepts_a_bare_torchvision_state_dict(tmp_path, run_up):
    import torchvision

    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    torch.save(net.state_dict(), tmp_path / "tv.pth")
    cfg = tiny_cfg(trainer={"max_epoch": 1})
    cfg["saver"] = {"save_dir": "checkpoints", "pretrain_model": str(tmp_path / "tv.pth")}
    _, res = train(run_up, tmp_path, "tv", cfg, "--opts", "default_hooks.best=null", "dataset.test=null")
    n = len(net.state_dict())
    assert f"loaded {n}/{n} tensors" in res.stdout


def test_worker_data_error_is_one_line(tmp_path, run_up):
    meta = tmp_path / "meta.txt"
    meta.write_text("missing.png 1\n")
    cfg = tiny_cfg(trainer={"max_epoch": 1})
    cfg["dataset"]["train"] = {"type": "cls", "kwargs": {"meta_file": str(meta), "image_dir": str(tmp_path),
                                                          "check_files": False}}
    cfg["dataset"]["num_workers"] = 1
    res = run_up(["train", "--config", write_cfg(tmp_path / "w.yaml", cfg), "--work-dir", tmp_path / "w"])
    assert res.exit_code == 2, (res.stderr, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "missing.png" in lines[0] and "Traceback" not in lines[0], res.stderr
