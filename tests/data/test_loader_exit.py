"""A process that ends with DataLoader workers still alive must still end.

Our workers ignore SIGTERM (the main process decides what a stop means), and multiprocessing's
exit handler terminates daemon children with SIGTERM and then waits for them without a timeout:
without our own exit handler an interrupted run, or a test session that ran one in-process,
hung forever after its last line."""
import subprocess
import sys

from conftest import REPO

LEFT_RUNNING = """
import builtins
from up_trainer.data.loader import WorkerTrackingLoader, ignore_stop_signals
loader = WorkerTrackingLoader(list(range(64)), batch_size=2, num_workers=2, worker_init_fn=ignore_stop_signals,
                              persistent_workers={persistent})
iterator = iter(loader)
next(iterator)
builtins.kept = (loader, iterator)  # still referenced at exit, as from a traceback
print("exiting", flush=True)
"""


def _run(persistent):
    res = subprocess.run([sys.executable, "-c", LEFT_RUNNING.format(persistent=persistent)], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "exiting" and "Traceback" not in res.stderr, res.stderr[-2000:]


def test_exit_with_live_workers_ends_promptly():
    _run(persistent=False)


def test_exit_with_live_persistent_workers_ends_promptly():
    _run(persistent=True)
