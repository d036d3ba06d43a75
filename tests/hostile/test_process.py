"""Real processes against each other: the scheduler's SIGTERM to the whole process group with
DataLoader workers running, and two `up train` on one run dir."""
import os
import signal
import socket
import stat
import subprocess
import sys
import time

import torch

from conftest import REPO, SUBPROCESS_PATH, invoke
from hostile_helpers import ProcResult, assert_one_line, fingerprint, tiny_cfg, write_yaml



def cfg_file(tmp_path, name, hooks=(), max_epoch=1, imports=(), **sections):
    """hostile_helpers' tiny run (2 iterations per epoch) with the test hooks importable."""
    cfg = tiny_cfg(**sections)
    cfg["trainer"]["max_epoch"] = max_epoch
    cfg["runtime"] = {**cfg["runtime"], "num_threads": 1, "imports": ["optim_helpers", "ctrl_plugin", *imports]}
    cfg["hooks"] = list(hooks)
    return write_yaml(tmp_path / f"{name}.yaml", cfg)


def start(cfg, work_dir, env=None):
    """`up train` in a session of its own: its pid is its process group, as under srun."""
    env = dict(os.environ, PYTHONPATH=SUBPROCESS_PATH, **(env or {}))
    cmd = [sys.executable, "-m", "up_trainer", "train", "--config", cfg, "--work-dir", str(work_dir)]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_file(path, proc, timeout=120):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"exited {proc.returncode} before {path}:\n{out[-3000:]}\n{err[-3000:]}")
        assert time.time() < deadline, f"timed out waiting for {path}"
        time.sleep(0.05)


def fake_scontrol(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol.log"
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(bin_dir), calls


def test_sigterm_to_the_process_group_with_two_workers_exits_143_and_requeues(tmp_path):
    """srun/scancel signal every process of the job: the DataLoader workers too. They must
    leave the decision to the main process: snapshot, requeue, exit 143."""
    bin_dir, calls = fake_scontrol(tmp_path)
    marker = tmp_path / "gate"
    cfg = cfg_file(tmp_path, "workers", max_epoch=2,
                   hooks=[{"type": "auto_checkpoint", "kwargs": {"requeue": True}},
                          {"type": "test_gate", "kwargs": {"at": [1], "marker": str(marker)}}],
                   dataset={"num_workers": 2})
    proc = start(cfg, tmp_path / "run", env={"PATH": bin_dir + os.pathsep + os.environ["PATH"],
                                             "SLURM_JOB_ID": "4242"})
    wait_file(f"{marker}.i1", proc)  # iteration 1 done; the workers are prefetching epoch 1
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, (out[-3000:], err[-3000:])
    assert "Traceback" not in err and "killed by signal" not in out + err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("up: SIGTERM received; snapshot written, exiting; resume with: up "
                                                   "train --config ")
    ckpts = tmp_path / "run" / "checkpoints"
    snap = torch.load(ckpts / "ckpt_e1-i1.pth", map_location="cpu", weights_only=True)
    assert (snap["iter"], snap["state"]["epoch_iter"]) == (1, 1)
    assert os.path.samefile(ckpts / "ckpt_latest.pth", ckpts / "ckpt_e1-i1.pth")
    assert calls.read_text() == "requeue 4242\n"


def test_worker_death_while_a_sigterm_is_pending_still_exits_143(tmp_path):
    """A worker dies (here SIGKILL) after the stop request and before the boundary that would
    act on it: the failure must not mask the interrupt: snapshot, requeue, exit 143."""
    bin_dir, calls = fake_scontrol(tmp_path)
    cfg = cfg_file(tmp_path, "death", max_epoch=2,
                   hooks=[{"type": "auto_checkpoint", "kwargs": {"requeue": True, "on_exception": False}},
                          {"type": "test_worker_death", "kwargs": {"at": 1}}],
                   dataset={"num_workers": 2})
    proc = start(cfg, tmp_path / "run", env={"PATH": bin_dir + os.pathsep + os.environ["PATH"],
                                             "SLURM_JOB_ID": "77"})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, (out[-3000:], err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("up: SIGTERM received; snapshot written, exiting (RuntimeError on the way: "
                           "DataLoader worker (pid"), last
    ckpts = tmp_path / "run" / "checkpoints"
    snap = torch.load(ckpts / "ckpt_e1-i1.pth", map_location="cpu", weights_only=True)
    assert snap["iter"] == 1
    assert calls.read_text() == "requeue 77\n"


def group_members(pgid):
    """pids of the live (not zombie) processes in process group ``pgid``."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while listed
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.add(int(entry))
    return pids


def test_workers_end_when_the_main_process_is_killed(tmp_path):
    """SIGKILL (the OOM killer, a node drain) gives the main process no chance to shut its
    DataLoader workers down: they must notice and end on their own, not stay behind holding
    their memory and their slots of the shared batch ring."""
    marker = tmp_path / "gate"
    cfg = cfg_file(tmp_path, "orphans", max_epoch=2,
                   hooks=[{"type": "test_gate", "kwargs": {"at": [1], "marker": str(marker)}}],
                   dataset={"num_workers": 2})
    proc = start(cfg, tmp_path / "run")
    wait_file(f"{marker}.i1", proc)  # the main process waits at the gate; its workers prefetch
    workers = group_members(proc.pid) - {proc.pid}
    assert len(workers) >= 2, workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.time() + 30
    while group_members(proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    assert not group_members(proc.pid), "DataLoader workers outlived the killed main process"


def test_second_run_in_the_same_run_dir_exits_2_naming_the_holder(tmp_path):
    """Two real `up train` on one run dir: the second stops at once, naming the first's PID and
    host, and touches nothing; the first runs on (it is stopped here with SIGTERM: exit 143)."""
    run_dir, marker = tmp_path / "run", tmp_path / "gate"
    first = start(cfg_file(tmp_path, "first", hooks=[{"type": "test_gate", "kwargs": {"at": [1],
                                                                                        "marker": str(marker)}}]),
                  run_dir)
    wait_file(f"{marker}.i1", first)
    before = {**fingerprint(run_dir / "checkpoints"), "config": fingerprint(run_dir)}
    second = start(cfg_file(tmp_path, "second"), run_dir)
    out, err = second.communicate(timeout=120)
    assert_one_line(ProcResult(second.returncode, out, err),
                    f"run dir {run_dir} is in use by another up train: PID {first.pid} on host "
                    f"{socket.gethostname()} since ", "give another --work-dir")
    assert {**fingerprint(run_dir / "checkpoints"), "config": fingerprint(run_dir)} == before
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 143, err[-3000:]
    assert (run_dir / "checkpoints" / "ckpt_e1-i1.pth").exists()


def test_lock_of_a_killed_run_is_taken_over(tmp_path):
    """SIGKILL leaves the lock file with the dead holder's PID: the next run takes it over."""
    run_dir, marker = tmp_path / "run", tmp_path / "gate"
    dead = start(cfg_file(tmp_path, "dead", hooks=[{"type": "test_gate", "kwargs": {"at": [1],
                                                                                      "marker": str(marker)}}]),
                 run_dir)
    wait_file(f"{marker}.i1", dead)
    dead.kill()
    dead.communicate(timeout=60)
    assert f"PID {dead.pid} on host" in (run_dir / ".up.lock").read_text()
    res = invoke(["train", "--config", cfg_file(tmp_path, "next"), "--work-dir", run_dir])
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert f"run dir lock: taking over from PID {dead.pid} on host" in res.stdout
    assert (run_dir / ".up.lock").read_text() == ""  # released cleanly


def test_sigterm_to_the_group_during_a_checkpoint_write_loses_nothing(tmp_path):
    """The group's SIGTERM lands while ckpt_e1.pth is half written (the write stalls for 2 s):
    the write completes, the snapshot follows, exit 143, every file loads, and auto_resume
    finishes the run."""
    marker, run_dir = tmp_path / "stalled", tmp_path / "run"
    cfg = cfg_file(tmp_path, "stall", max_epoch=3, imports=["slow_save_plugin"], dataset={"num_workers": 2})
    proc = start(cfg, run_dir, env={"UP_TEST_STALL_AT": "1", "UP_TEST_STALL_SECONDS": "2",
                                    "UP_TEST_MARKER": str(marker)})
    wait_file(marker, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, (out[-3000:], err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    ckpts = run_dir / "checkpoints"
    names = sorted(n for n in os.listdir(ckpts) if n.startswith("ckpt_"))
    loaded = {n: torch.load(ckpts / n, map_location="cpu", weights_only=True) for n in names}
    assert loaded["ckpt_e1.pth"]["epoch"] == 1 and loaded["ckpt_e1.pth"]["state"]["epoch_done"]
    assert loaded["ckpt_latest.pth"]["iter"] >= 2
    left = [n for n in os.listdir(ckpts) if not n.startswith("ckpt_") and n != ".up.lock"]  # the run's lock stays
    assert not left, os.listdir(ckpts)  # no temp file left
    resumed = invoke(["train", "--config", cfg_file(tmp_path, "resume", max_epoch=3,
                                                    saver={"save_dir": "checkpoints", "auto_resume": True}),
                      "--work-dir", run_dir])
    assert resumed.exit_code == 0, (resumed.stderr, resumed.exception)
    assert torch.load(ckpts / "ckpt_e3.pth", map_location="cpu", weights_only=True)["iter"] == 6
