"""Crash harness: kill a real training process at seeded random moments, resume, repeat.

    python benchmarks/crash_harness.py [--kills 50] [--seed 0] [--work DIR]

Each round starts `up train` (2 DataLoader workers, saver.auto_resume) on the same run
directory in a process group of its own, and after a random delay (some land inside
checkpoint writes: those take a visible share of each epoch) signals the whole group, as a
scheduler does: odd rounds SIGKILL, even rounds SIGTERM. A SIGTERM is sent once training has
started (the delay counts from auto_checkpoint's log line saying its handlers are installed;
before, Python's default action would simply kill the process) and must end in exit 143 (the interrupt snapshot) or 0 (the run
had finished; or death by the signal after training, once the default handlers are back);
never exit 1 ("DataLoader worker killed"). After every kill, every file
named ckpt_* must load with weights_only=True. When the kills are spent, the run is finished
without interruption and its final weights must be bitwise equal to those of a run that was
never killed. tests/engine/test_crash_harness.py runs a short version.
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import torch
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def harness_config(max_epoch=4):
    """Tiny digits run that saves often, so kills find checkpoints of every kind."""
    return {
        "runtime": {"seed": 5, "num_threads": 1},
        "dataset": {
            "train": {"type": "digits", "kwargs": {"split": "train", "subset": 128}},
            "test": {"type": "digits", "kwargs": {"split": "test", "subset": 32}},
            "batch_size": 16,
            "num_workers": 2,  # the workers get the group's signals too
        },
        "trainer": {"max_epoch": max_epoch, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.05, "momentum": 0.9}}},
        "saver": {"save_dir": "checkpoints", "auto_resume": True},
        "net": {"type": "resnet18", "kwargs": {"num_classes": 10, "in_channels": 1, "small_input": True}},
    }


def start(cfg_path, run_dir):
    """`up train` in a new session: its pid is its process group (workers included), as under srun."""
    cmd = [sys.executable, "-m", "up_trainer", "train", "--config", cfg_path, "--work-dir", run_dir]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


# Exit codes a round may end with, by the signal sent to the group: finished before it, killed,
# or the snapshot-and-exit path (SIGTERM: also killed by it in the last moments, once training
# has ended and auto_checkpoint has given the default handlers back).
ALLOWED = {signal.SIGKILL: (0, -signal.SIGKILL), signal.SIGTERM: (0, 143, -signal.SIGTERM)}
TRAINING_STARTED = "auto_checkpoint: SIGINT, SIGTERM"  # logged once its signal handlers are installed


def wait_for_training(proc, log_path, offset, timeout=600):
    """Wait until train.log, past ``offset``, says training started (or the run ended)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if os.path.exists(log_path):
            with open(log_path, encoding="utf-8", errors="replace") as f:
                f.seek(offset)
                if TRAINING_STARTED in f.read():
                    return
        time.sleep(0.05)


def check_files(save_dir):
    """Every ckpt_* file on disk loads; returns their names."""
    names = sorted(n for n in os.listdir(save_dir)) if os.path.isdir(save_dir) else []
    for name in names:
        if name.startswith("ckpt_"):
            torch.load(os.path.join(save_dir, name), map_location="cpu", weights_only=True)
    return [n for n in names if n.startswith("ckpt_")]


def run_to_end(cfg_path, run_dir, timeout=900):
    proc = start(cfg_path, run_dir)
    _, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"run in {run_dir} failed with {proc.returncode}: {err[-2000:]}")


def final_weights(run_dir, max_epoch):
    path = os.path.join(run_dir, "checkpoints", f"ckpt_e{max_epoch}.pth")
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def crash_and_resume(work, kills, seed, max_epoch=4, log=print):
    """Returns (kills that hit a live process, chains whose final weights equal the clean run,
    chains, SIGTERMs answered with exit 143). A chain is one run directory resumed after every
    kill until it finishes."""
    cfg_path = os.path.join(work, "cfg.yaml")
    with open(cfg_path, "w") as f:
        yaml.safe_dump(harness_config(max_epoch), f)
    clean_dir = os.path.join(work, "clean")
    t0 = time.perf_counter()
    run_to_end(cfg_path, clean_dir)
    clean_s = time.perf_counter() - t0
    clean = final_weights(clean_dir, max_epoch)
    rng = random.Random(seed)
    hits, terms_143, results = 0, 0, []

    def finish(chain_dir):
        check_files(os.path.join(chain_dir, "checkpoints"))
        got = final_weights(chain_dir, max_epoch)
        results.append(all(torch.equal(clean[k], got[k]) for k in clean))

    chain_dir = os.path.join(work, "chain0")
    for k in range(kills):
        sig = signal.SIGKILL if k % 2 == 0 else signal.SIGTERM
        log_path = os.path.join(chain_dir, "train.log")
        offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        proc = start(cfg_path, chain_dir)
        delay = rng.uniform(0.2, clean_s)
        if sig == signal.SIGTERM:
            wait_for_training(proc, log_path, offset)
            delay = rng.uniform(0.3, clean_s / 2)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, sig)
            proc.wait()
            hits += 1
        _, err = proc.communicate()
        if proc.returncode not in ALLOWED[sig]:
            raise RuntimeError(f"round {k + 1} ({sig.name}): exit {proc.returncode}: {err[-2000:]}")
        terms_143 += proc.returncode == 143
        names = check_files(os.path.join(chain_dir, "checkpoints"))
        outcome = "finished" if proc.returncode == 0 else f"{sig.name} to the group, exit {proc.returncode}"
        log(f"round {k + 1}/{kills}: {outcome} after {delay:.2f}s; {len(names)} checkpoint files, all load")
        if proc.returncode == 0:  # the chain finished before its kill: compare, start a new one
            finish(chain_dir)
            chain_dir = os.path.join(work, f"chain{len(results)}")
    run_to_end(cfg_path, chain_dir)
    finish(chain_dir)
    return hits, sum(results), len(results), terms_143


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="up-crash-")
    os.makedirs(work, exist_ok=True)
    hits, equal, chains, terms_143 = crash_and_resume(work, args.kills, args.seed)
    print(f"kills that hit a running process: {hits}/{args.kills} (SIGTERMs answered with exit 143: "
          f"{terms_143}); chains ending bitwise equal to the clean run: {equal}/{chains}")
    sys.exit(0 if equal == chains else 1)


if __name__ == "__main__":
    main()
