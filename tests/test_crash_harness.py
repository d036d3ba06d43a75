"""Short version of benchmarks/crash_harness.py: random SIGKILLs of a real training process."""
import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from crash_harness import crash_and_resume  # noqa: E402


def test_random_sigkills_then_resume_end_bitwise_equal(tmp_path):
    hits, equal, chains = crash_and_resume(str(tmp_path), kills=3, seed=1, max_epoch=3, log=lambda _: None)
    assert hits >= 1
    assert equal == chains >= 1
