"""A disk that fills up or refuses writes, made real: a file-size limit (RLIMIT_FSIZE: the
kernel answers EFBIG, as a full disk answers ENOSPC) in a subprocess, and a small tmpfs where
this test may mount one (root). One line, exit 2, the earlier checkpoints intact, and the log
never announces the checkpoint that could not be written."""
import os
import resource
import signal
import subprocess
import sys
from contextlib import contextmanager

import pytest
import yaml

from conftest import REPO, SUBPROCESS_PATH, invoke
from hostile_helpers import assert_one_line, copy_run, fingerprint, tiny_cfg, trained_run, write_yaml  # noqa: F401



def resume_cfg(tmp_path, async_write=True):
    """Resume the trained one-epoch run for a second epoch (whose checkpoint is due)."""
    cfg = tiny_cfg(runtime={"seed": 5, "num_threads": 1, "imports": ["optim_helpers"]}, trainer={"max_epoch": 2},
                   saver={"save_dir": "checkpoints", "auto_resume": True, "async_write": async_write})
    # eval_insight's confusion-matrix PNG is a run file larger than half a checkpoint: it would
    # meet the limit first (a run-file failure: test_run_lifecycle.py); here the checkpoint must
    cfg["default_hooks"] = {"insight": None}
    return write_yaml(tmp_path / "cfg.yaml", cfg)


class Result:
    def __init__(self, proc):
        self.exit_code, self.stdout, self.stderr, self.exception = proc.returncode, proc.stdout, proc.stderr, None


def run_limited(cfg, work_dir, max_file_bytes):
    """`up train` in a subprocess whose files cannot grow past ``max_file_bytes``."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write() instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    env = dict(os.environ, PYTHONPATH=SUBPROCESS_PATH, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "up_trainer", "train", "--config", cfg, "--work-dir", str(work_dir)],
                          cwd=REPO, env=env, capture_output=True, text=True, preexec_fn=limit, timeout=300)
    return Result(proc)


def assert_failed_write_kept_the_past(result, save_dir, before, name="ckpt_e2.pth", why="File too large",
                                      run_dir=None):
    assert_one_line(result, f"cannot write checkpoint {save_dir / name}: {why}; "
                    "the checkpoints written before it are intact")
    assert fingerprint(save_dir) == before  # ckpt_e1, latest and best: byte for byte
    assert not [n for n in os.listdir(save_dir) if ".tmp" in n]  # no temp file left behind
    log = ((run_dir or save_dir.parent) / "train.log").read_text()
    assert "checkpoint written" not in log and name not in log.replace(f"cannot write checkpoint {save_dir / name}", "")


@pytest.mark.parametrize("async_write", [True, False], ids=["background", "synchronous"])
def test_file_too_large_during_a_checkpoint_write(tmp_path, trained_run, async_write):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    size = os.path.getsize(save_dir / "ckpt_e1.pth")
    result = run_limited(resume_cfg(tmp_path, async_write), tmp_path, size // 2)  # logs and configs still fit
    assert_failed_write_kept_the_past(result, save_dir, before)


@contextmanager
def small_tmpfs(path, size_kb, read_only=False):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size_kb}k" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory, leave_bytes):
    """Fill the filesystem of ``directory`` until about ``leave_bytes`` stay free."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    with open(os.path.join(directory, "filler"), "wb") as f:
        try:
            f.write(b"\0" * max(0, free - leave_bytes))
            f.flush()
        except OSError:
            pass


def test_disk_full_during_a_checkpoint_write(tmp_path, trained_run):  # noqa: F811
    """Only save_dir is on the full disk (the run dir's own files on a full disk: the run-file
    cases of test_run_lifecycle.py), so the checkpoint is the write that fails."""
    with small_tmpfs(tmp_path / "disk", 1024) as disk:
        save_dir = copy_run(trained_run, disk)
        before = fingerprint(save_dir)
        cfg = yaml.safe_load(open(resume_cfg(tmp_path)))
        cfg["saver"]["save_dir"] = str(save_dir)
        cfg = write_yaml(tmp_path / "cfg.yaml", cfg)
        fill(disk, leave_bytes=16 * 1024)  # room for the directory lock, not for a 38 KB checkpoint
        result = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "work"])
        assert_failed_write_kept_the_past(result, save_dir, before, why="No space left on device",
                                          run_dir=tmp_path / "work")


def test_full_work_dir_at_start(tmp_path, trained_run):  # noqa: F811
    with small_tmpfs(tmp_path / "disk", 512) as disk:
        save_dir = copy_run(trained_run, disk)
        before = fingerprint(save_dir)
        fill(disk, leave_bytes=0)
        result = invoke(["train", "--config", resume_cfg(tmp_path), "--work-dir", disk])
        assert_one_line(result, f"--work-dir: cannot write in {disk}: No space left on device")
        assert fingerprint(save_dir) == before


def test_read_only_work_dir_at_start(tmp_path, trained_run):  # noqa: F811
    if os.geteuid() == 0:
        with small_tmpfs(tmp_path / "disk", 512) as disk:
            save_dir = copy_run(trained_run, disk)
            before = fingerprint(save_dir)
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
            result = invoke(["train", "--config", resume_cfg(tmp_path), "--work-dir", disk])
            assert_one_line(result, f"--work-dir: cannot write in {disk}: Read-only file system")
            assert fingerprint(save_dir) == before
    else:  # without root, permissions make it read-only
        save_dir = copy_run(trained_run, tmp_path / "ro")
        os.chmod(tmp_path / "ro", 0o555)
        try:
            result = invoke(["train", "--config", resume_cfg(tmp_path), "--work-dir", tmp_path / "ro"])
            assert_one_line(result, f"--work-dir: cannot write in {tmp_path / 'ro'}: Permission denied")
        finally:
            os.chmod(tmp_path / "ro", 0o755)


def test_read_only_save_dir_at_start(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    if os.geteuid() == 0:  # root writes through permissions: a read-only bind mount instead
        done = subprocess.run(["mount", "--bind", "-o", "ro", str(save_dir), str(save_dir)], capture_output=True)
        if done.returncode != 0:
            pytest.skip("cannot bind-mount here")
    else:
        os.chmod(save_dir, 0o555)
    try:
        result = invoke(["train", "--config", resume_cfg(tmp_path), "--work-dir", tmp_path])
        assert_one_line(result, f"saver.save_dir: cannot write in {save_dir}: ")
        assert fingerprint(save_dir) == before
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(save_dir)], check=False)
        else:
            os.chmod(save_dir, 0o755)
