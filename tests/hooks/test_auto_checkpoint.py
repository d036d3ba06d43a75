"""auto_checkpoint with real signals: a real `python -m up_trainer train` subprocess is sent
SIGTERM mid-epoch and resumed; other signal paths run in-process with real os.kill signals.

The test_gate hook (tests/plugins/ctrl_plugin.py) holds the run at a known boundary until the
signal is queued, so the snapshot's iteration is deterministic however loaded the box is.
"""
import os
import signal
import stat
import subprocess
import sys
import time

import torch
import yaml

from conftest import REPO, SUBPROCESS_PATH

DIGITS = os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml")
# 96 train images / batch 16 = 6 iterations per epoch; 8x8 images; one thread (a busy box).
SMALL = {
    "runtime": {"seed": 7, "num_threads": 1, "imports": ["ctrl_plugin"]},
    "dataset": {"train": {"kwargs": {"subset": 96, "size": 8}}, "test": {"kwargs": {"subset": 48, "size": 8}},
                "batch_size": 16},
    "trainer": {"max_epoch": 2},
    "default_hooks": {"logger": {"type": "train_val_logger", "kwargs": {"summary_writer": "none", "plot": False}}},
}


def make_cfg(tmp_path, name, hooks=(), **sections):
    """A YAML file: the digits demo config underneath, shrunk, plus test hooks."""
    cfg = {"_base_": DIGITS, **yaml.safe_load(yaml.safe_dump(SMALL))}
    for key, value in sections.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    cfg["hooks"] = list(hooks)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_tensors_equal(a, b, where="model"):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{where}.{k} differs"


def snapshots(ckpts):
    return sorted(n for n in os.listdir(ckpts) if n.startswith("ckpt_e") and "-i" in n)


def popen(cfg, work_dir, *extra, env=None):
    env = dict(os.environ, PYTHONPATH=SUBPROCESS_PATH, **(env or {}))
    cmd = [sys.executable, "-m", "up_trainer", "train", "--config", cfg, "--work-dir", str(work_dir), *extra]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_file(path, proc, timeout=300):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {path}:\n{proc.stdout.read()[-4000:]}")
        assert time.time() < deadline, f"timed out waiting for {path}"
        time.sleep(0.05)


def test_sigterm_mid_epoch_exits_143_and_resumes_bitwise_equal(tmp_path, run_up):
    victim_dir, marker = tmp_path / "victim", tmp_path / "gate"
    gated = make_cfg(tmp_path, "gated", hooks=[{"type": "test_gate", "kwargs": {"at": [3], "marker": str(marker)}}])
    proc = popen(gated, victim_dir)
    # The uninterrupted reference trains in this process while the subprocess starts up.
    plain = make_cfg(tmp_path, "plain", saver={"auto_resume": True})
    ref = run_up(["train", "--config", plain, "--work-dir", tmp_path / "straight"])
    assert ref.exit_code == 0, (ref.stderr, ref.exception)

    wait_file(f"{marker}.i3", proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 143, out[-4000:]
    ckpts = victim_dir / "checkpoints"
    assert snapshots(ckpts) == ["ckpt_e1-i3.pth"], os.listdir(ckpts)
    snap = load(ckpts / "ckpt_e1-i3.pth")  # weights_only: no pickled objects
    assert (snap["epoch"], snap["iter"], snap["state"]["epoch_iter"], snap["state"]["epoch_done"]) == (1, 3, 3, False)
    assert {"model", "optimizer", "lr_scheduler", "scaler", "ema", "hooks", "rng", "config"} <= set(snap)
    assert os.path.samefile(ckpts / "ckpt_latest.pth", ckpts / "ckpt_e1-i3.pth")
    assert not (ckpts / "ckpt_e1.pth").exists()
    assert "SIGTERM received: writing ckpt_e1-i3.pth" in out

    # Resume the way a requeued job does (saver.auto_resume), without the gate.
    done = popen(plain, victim_dir)
    out, _ = done.communicate(timeout=600)
    assert done.returncode == 0, out[-4000:]
    assert "resumed from" in out and "epoch 1 batch 3/6" in out
    a, b = load(tmp_path / "straight" / "checkpoints" / "ckpt_e2.pth"), load(ckpts / "ckpt_e2.pth")
    assert_tensors_equal(a["model"], b["model"])
    assert_tensors_equal(a["optimizer"]["state"][0], b["optimizer"]["state"][0], "optimizer.state[0]")
    assert a["iter"] == b["iter"] == 12 and a["metric_val"] == b["metric_val"]


def fake_scontrol(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.log"
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(bin_dir), log


def test_sigusr1_snapshots_and_continues_then_sigint_exits_130(tmp_path, run_up, monkeypatch):
    """Real signals to this process: USR1 at iteration 2 (snapshot, requeue, go on), INT at 8."""
    bin_dir, calls = fake_scontrol(tmp_path)
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    cfg = make_cfg(tmp_path, "usr1", hooks=[
        {"type": "auto_checkpoint", "kwargs": {"requeue": True}},
        {"type": "test_gate", "kwargs": {"at": [2], "send": "SIGUSR1"}},
        {"type": "test_gate", "kwargs": {"at": [8], "send": "SIGINT"}}])
    before = signal.getsignal(signal.SIGINT)
    res = run_up(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
    assert res.exit_code == 130, (res.stdout[-3000:], res.exception)
    ckpts = tmp_path / "run" / "checkpoints"
    assert snapshots(ckpts) == ["ckpt_e1-i2.pth", "ckpt_e2-i8.pth"]
    assert (ckpts / "ckpt_e1.pth").exists()  # SIGUSR1 did not stop the run
    assert os.path.samefile(ckpts / "ckpt_latest.pth", ckpts / "ckpt_e2-i8.pth")
    assert load(ckpts / "ckpt_e1-i2.pth")["state"]["epoch_iter"] == 2
    assert calls.read_text().split("\n") == ["requeue 4242", ""]  # once: after USR1, not after INT
    assert "requeued SLURM job 4242" in res.stdout
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored


def test_signal_during_eval_is_handled_at_next_boundary(tmp_path, run_up):
    """SIGTERM during epoch 1's evaluation: epoch 1's checkpoint is written as scheduled, then
    the run stops at the start of epoch 2 without a redundant snapshot (latest is ckpt_e1)."""
    cfg = make_cfg(tmp_path, "evalsig", hooks=[{"type": "test_gate", "kwargs": {"after_eval": [1], "send": "SIGTERM"}}])
    res = run_up(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
    assert res.exit_code == 143, (res.stdout[-3000:], res.exception)
    ckpts = tmp_path / "run" / "checkpoints"
    assert snapshots(ckpts) == []
    assert os.path.samefile(ckpts / "ckpt_latest.pth", ckpts / "ckpt_e1.pth")
    assert "already saved" in res.stdout


def test_stop_after_the_last_iteration_exits_with_its_code(tmp_path, run_up):
    cfg = make_cfg(tmp_path, "last", hooks=[{"type": "test_gate", "kwargs": {"after_eval": [2], "send": "SIGINT"}}])
    res = run_up(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
    assert res.exit_code == 130, (res.stdout[-3000:], res.exception)
    ckpts = tmp_path / "run" / "checkpoints"
    assert load(ckpts / "ckpt_e2.pth")["state"]["epoch_done"] is True
    assert os.path.samefile(ckpts / "ckpt_latest.pth", ckpts / "ckpt_e2.pth")


def test_exception_writes_a_snapshot_then_reraises(tmp_path, run_up):
    cfg = make_cfg(tmp_path, "boom", hooks=[{"type": "test_fault", "kwargs": {"raise_at": 9}}])
    res = run_up(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
    assert res.exit_code == 1 and "boom at iteration 9" in str(res.exception)
    ckpts = tmp_path / "run" / "checkpoints"
    assert snapshots(ckpts) == ["ckpt_e2-i8.pth"]  # the last completed iteration
    snap = load(ckpts / "ckpt_e2-i8.pth")
    assert (snap["iter"], snap["state"]["epoch_iter"]) == (8, 2)
    assert os.path.samefile(ckpts / "ckpt_latest.pth", ckpts / "ckpt_e2-i8.pth")


def test_requeue_without_slurm_only_warns(tmp_path, monkeypatch, caplog):
    from up_trainer.hooks.auto_checkpoint import requeue_slurm_job

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert requeue_slurm_job() is False
    bin_dir, calls = fake_scontrol(tmp_path)
    (tmp_path / "bin" / "scontrol").write_text("#!/bin/sh\necho nope >&2\nexit 1\n")
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert requeue_slurm_job() is False  # a failing scontrol is logged, never raised


def test_bad_signal_name_is_a_config_error(tmp_path, run_up):
    cfg = make_cfg(tmp_path, "bad", hooks=[{"type": "auto_checkpoint", "kwargs": {"signals": ["SIGTREM"]}}])
    res = run_up(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
    assert res.exit_code == 2
    assert "hooks[0].kwargs.signals[0]: unsupported signal 'SIGTREM'" in res.stderr
    assert "did you mean 'SIGTERM'" in res.stderr
