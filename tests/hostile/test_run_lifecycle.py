"""A run's life from start to resume, attacked: which checkpoint auto_resume picks, two runs
sharing a directory, a data set too small for one batch, a second stop signal during the
snapshot write, a full run-dir disk mid-epoch, and a resume past the configured end."""
import os
import shutil
import signal
import socket
import time

import pytest
import torch

from conftest import invoke
from hostile_helpers import assert_one_line, fingerprint, tiny_cfg, write_yaml
from test_disk import fill, small_tmpfs
from test_process import cfg_file, start, wait_file
from up_trainer.hooks.base import Hook
from up_trainer.registry import HOOKS


def quiet_logger(**kwargs):
    """train_val_logger writing a metrics row at every iteration, nothing slow."""
    return {"logger": {"type": "train_val_logger", "kwargs": {
        "freq": 1, "summary_writer": "none", "plot": False, "progress_bar": False, **kwargs}}}


@pytest.fixture(scope="module")
def two_epoch_run(tmp_path_factory):
    """A finished two-epoch run (2 iterations per epoch): (work_dir, save_dir)."""
    work = tmp_path_factory.mktemp("two_epochs")
    cfg = tiny_cfg()
    cfg["trainer"]["max_epoch"] = 2
    res = invoke(["train", "--config", write_yaml(work / "cfg.yaml", cfg), "--work-dir", work])
    assert res.exit_code == 0, (res.stderr, res.exception)
    return work, work / "checkpoints"


def resume_cfg(path, max_epoch, **saver):
    cfg = tiny_cfg(saver={"save_dir": "checkpoints", **saver})
    cfg["trainer"]["max_epoch"] = max_epoch
    return write_yaml(path, cfg)


# -- 5: auto_resume chooses by the position recorded in the file, never by file times ----------

@pytest.mark.parametrize("how", ["touched", "copied"])
def test_auto_resume_takes_the_furthest_checkpoint_whatever_the_file_times(tmp_path, two_epoch_run, how):
    work, _ = two_epoch_run
    run = tmp_path / "run"
    if how == "copied":  # `cp -r RUN RUN2`: every file gets a new time, in listing order
        shutil.copytree(work, run, copy_function=shutil.copyfile)
        for i, name in enumerate(sorted(os.listdir(run / "checkpoints"), key=lambda n: n == "ckpt_e1.pth")):
            os.utime(run / "checkpoints" / name, (time.time() + i, time.time() + i))  # ckpt_e1.pth last
    else:  # `touch ckpt_e1.pth`: the oldest file looks the newest
        shutil.copytree(work, run)
        future = time.time() + 3600
        os.utime(run / "checkpoints" / "ckpt_e1.pth", (future, future))
    before = fingerprint(run / "checkpoints")
    res = invoke(["train", "--config", resume_cfg(tmp_path / "cfg.yaml", 3, auto_resume=True), "--work-dir", run])
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert "at end of epoch 2 (iteration 4)" in res.stdout, res.stdout[-3000:]
    after = fingerprint(run / "checkpoints")
    assert {n: after[n] for n in ("ckpt_e1.pth", "ckpt_e2.pth")} == {
        n: before[n] for n in ("ckpt_e1.pth", "ckpt_e2.pth")}  # epoch 2 was not trained again
    assert torch.load(run / "checkpoints" / "ckpt_e3.pth", weights_only=True)["iter"] == 6


# -- 6: every directory a run writes is locked ---------------------------------------------------

def test_two_runs_sharing_an_absolute_save_dir_second_exits_2_naming_it(tmp_path):
    save_dir, marker = tmp_path / "shared_ckpts", tmp_path / "gate"
    gate = {"type": "test_gate", "kwargs": {"at": [1], "marker": str(marker)}}
    first = start(cfg_file(tmp_path, "first", hooks=[gate], saver={"save_dir": str(save_dir)}), tmp_path / "a")
    wait_file(f"{marker}.i1", first)
    try:
        before = fingerprint(save_dir)
        second = invoke(["train", "--config", cfg_file(tmp_path, "second", saver={"save_dir": str(save_dir)}),
                         "--work-dir", tmp_path / "b"])
        assert_one_line(second, f"saver.save_dir {save_dir} is in use by another up train: PID {first.pid} on host "
                        f"{socket.gethostname()}")
        assert fingerprint(save_dir) == before
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    assert first.returncode == 143
    assert torch.load(save_dir / "ckpt_e1-i1.pth", weights_only=True)["iter"] == 1


# -- 10: a data set that cannot fill one batch ---------------------------------------------------

def test_batch_larger_than_the_data_set_with_drop_last_is_refused(tmp_path):
    cfg = tiny_cfg(dataset={"batch_size": 64, "drop_last": True})
    res = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path])
    assert_one_line(res, "dataset.batch_size: 64", "32 training samples", "drop_last", "0 iterations")
    assert fingerprint(tmp_path / "checkpoints") == {}


def test_per_process_shard_smaller_than_a_batch_is_refused():
    """Under DDP each process gets 1/world_size of the data: 32 samples on 4 processes leave
    8 per process, fewer than a batch of 16."""
    from up_trainer.data.loader import LoaderFactory
    from up_trainer.engine.run_length import check_epoch_len
    from up_trainer.errors import ConfigError

    ds_cfg = {"batch_size": 16, "drop_last": True, "num_workers": 0}
    with pytest.raises(ConfigError) as err:
        check_epoch_len(LoaderFactory(ds_cfg, list(range(32)), None, seed=0, rank=0, world_size=4), ds_cfg, 4)
    assert "8 per process on 4 processes" in str(err.value) and "16" in str(err.value)
    with pytest.raises(ConfigError) as err:
        check_epoch_len(LoaderFactory(dict(ds_cfg, drop_last=False), [], None, seed=0), ds_cfg, 1)
    assert "dataset.train: the training set is empty" in str(err.value)


# -- 11: a second SIGTERM while the snapshot is written ------------------------------------------

def test_second_sigterm_during_the_snapshot_write_still_completes_it(tmp_path):
    """The first SIGTERM asks for the snapshot; the second lands while it is half written (on
    the background writer: the training thread is already on its way out)."""
    marker, run_dir = tmp_path / "stalled", tmp_path / "run"
    cfg = cfg_file(tmp_path, "stall", max_epoch=2, imports=["slow_save_plugin"],
                   hooks=[{"type": "test_gate", "kwargs": {"at": [1], "send": "SIGTERM"}}])
    proc = start(cfg, run_dir, env={"UP_TEST_STALL_AT": "1", "UP_TEST_STALL_SECONDS": "2",
                                    "UP_TEST_MARKER": str(marker)})
    wait_file(marker, proc)  # the snapshot is half written
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, (proc.returncode, out[-3000:], err[-3000:])
    last = err.strip().splitlines()[-1]  # the exit line says how to resume
    assert last.startswith("up: SIGTERM received; snapshot written, exiting; resume with: up train "), last
    resume_args = last.split("resume with: up train ", 1)[1].split()
    assert sorted(resume_args) == sorted(["--config", cfg, "--work-dir", str(run_dir),
                                          "--resume", str(run_dir / "checkpoints" / "ckpt_latest.pth")]), last
    ckpts = run_dir / "checkpoints"
    assert torch.load(ckpts / "ckpt_e1-i1.pth", weights_only=True)["iter"] == 1
    assert os.path.samefile(ckpts / "ckpt_latest.pth", ckpts / "ckpt_e1-i1.pth")
    assert not [n for n in os.listdir(ckpts) if ".tmp" in n], os.listdir(ckpts)


# -- 12: the run dir's disk fills up mid-epoch ----------------------------------------------------

@HOOKS.register("test_fill_disk")
class FillDisk(Hook):
    """Test only: after the update of iteration ``at`` the filesystem of ``path`` is full."""

    priority = "HIGH"  # before the logger writes this iteration's row

    def __init__(self, path: str = "", at: int = 1):
        super().__init__()
        self.path, self.at = path, at

    def after_update(self, trainer, iteration):
        if iteration == self.at:
            fill(self.path, leave_bytes=0)


@pytest.mark.parametrize("full", ["run_dir", "logdir"])
def test_full_run_dir_disk_mid_epoch_snapshots_then_one_line(tmp_path, full):
    with small_tmpfs(tmp_path / "disk", 256) as disk:
        save_dir = tmp_path / "checkpoints"  # on a healthy disk
        run_dir = disk if full == "run_dir" else tmp_path / "run"
        writer = {"summary_writer": "tensorboard", "logdir": str(disk / "tb")} if full == "logdir" else {}
        cfg = tiny_cfg(saver={"save_dir": str(save_dir)}, default_hooks=quiet_logger(**writer),
                       hooks=[{"type": "test_fill_disk", "kwargs": {"path": str(disk), "at": 1}}])
        cfg["trainer"]["max_epoch"] = 2
        res = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", run_dir])
        line = assert_one_line(res, "No space left on device", str(disk))
        assert "ckpt_latest.pth" in line, line
        snapshot = torch.load(save_dir / "ckpt_latest.pth", weights_only=True)
        assert snapshot["iter"] in (1, 2)  # the state when the write failed, not an untrained one
        left = [os.path.join(d, n) for d, _, names in os.walk(disk) for n in names if ".tmp" in n or ".trim" in n]
        assert not left, left
        assert not [n for n in os.listdir(save_dir) if ".tmp" in n]


# -- 18: a resume at or past the configured end ----------------------------------------------------

def test_resume_past_max_epoch_is_refused(tmp_path, two_epoch_run):
    work, save_dir = two_epoch_run
    shutil.copytree(work, tmp_path / "run")
    before = fingerprint(tmp_path / "run" / "checkpoints")
    res = invoke(["train", "--config", resume_cfg(tmp_path / "cfg.yaml", 1), "--work-dir", tmp_path / "run",
                  "--resume", tmp_path / "run" / "checkpoints" / "ckpt_e2.pth"])
    assert_one_line(res, "ckpt_e2.pth", "epoch 2", "trainer.max_epoch is 1", "raise trainer.max_epoch")
    assert fingerprint(tmp_path / "run" / "checkpoints") == before


def test_resume_of_a_finished_run_says_it_is_complete(tmp_path, two_epoch_run):
    work, _ = two_epoch_run
    shutil.copytree(work, tmp_path / "run")
    run = tmp_path / "run"
    before = {**fingerprint(run / "checkpoints"), "metrics": (run / "metrics.csv").read_bytes()
              if (run / "metrics.csv").exists() else None}
    res = invoke(["train", "--config", resume_cfg(tmp_path / "cfg.yaml", 2), "--work-dir", run,
                  "--resume", run / "checkpoints" / "ckpt_e2.pth"])
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert "already complete" in res.stdout and "nothing to train" in res.stdout, res.stdout[-2000:]
    assert {**fingerprint(run / "checkpoints"), "metrics": (run / "metrics.csv").read_bytes()
            if (run / "metrics.csv").exists() else None} == before
