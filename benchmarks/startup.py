"""Start-up cost of the CLI, each figure next to `python -c "import torch, torchvision"`.

    python benchmarks/startup.py [--repeats 5]

Prints medians of alternating runs: `up --help` (target <= 0.3 s: no torch import on that path),
`up config` on the demo config, and the time to the first training iteration beyond the imports
(target <= 1.5 s).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml")


def timed(cmd, env=None, until=None):
    """Seconds until the command exits, or until a line containing `until` is printed."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if until is None:
        out = proc.communicate()[0]
        if proc.returncode:
            raise SystemExit(f"{cmd} failed:\n{out}")
        return time.perf_counter() - start
    for line in proc.stdout:
        if until in line:
            elapsed = time.perf_counter() - start
            proc.kill()
            proc.wait()
            return elapsed
    raise SystemExit(f"{cmd} ended without printing {until!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    py = sys.executable
    work = tempfile.mkdtemp(prefix="up-startup-")
    cases = {
        "import torch, torchvision": [py, "-c", "import torch, torchvision"],
        "up --help": [py, "-m", "up_trainer", "--help"],
        "up config": [py, "-m", "up_trainer", "config", "--config", DEMO],
        "first iteration": [py, "-m", "up_trainer", "train", "--config", DEMO, "--work-dir", work,
                            "--display", "1", "--opts", "default_hooks.best=null"],
    }
    times = {k: [] for k in cases}
    for _ in range(args.repeats):  # alternate so load changes hit every case alike
        for name, cmd in cases.items():
            until = "epoch 1 [1/" if name == "first iteration" else None
            times[name].append(timed(cmd, until=until))
    base = statistics.median(times["import torch, torchvision"])
    print(f"{'case':<28}{'median s':>10}{'minus imports s':>18}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<28}{med:>10.3f}{med - base:>18.3f}")
    help_t = statistics.median(times["up --help"])
    first = statistics.median(times["first iteration"]) - base
    print(f"\nup --help {help_t:.3f} s (target <= 0.3 s): {'OK' if help_t <= 0.3 else 'ABOVE TARGET'}")
    print(f"first iteration {first:.3f} s beyond imports (target <= 1.5 s): {'OK' if first <= 1.5 else 'ABOVE TARGET'}")


if __name__ == "__main__":
    main()
