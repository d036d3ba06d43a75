"""Short version of benchmarks/crash_harness.py: SIGKILL and SIGTERM to the process group of a
real training process with 2 DataLoader workers, at random moments."""
import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from crash_harness import crash_and_resume  # noqa: E402


def test_random_kills_then_resume_end_bitwise_equal(tmp_path):
    # rounds: SIGKILL, SIGTERM, SIGKILL; a SIGTERM answered with anything but 0/143 (or death
    # before the handlers exist) raises inside the harness
    hits, equal, chains, _ = crash_and_resume(str(tmp_path), kills=3, seed=1, max_epoch=3, log=lambda _: None)
    assert hits >= 1
    assert equal == chains >= 1
