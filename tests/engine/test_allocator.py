"""runtime.tune_malloc: a training step's freed large blocks are not page-faulted back in."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, tiny_cfg, write_cfg
from up_trainer.config import resolve_config
from up_trainer.engine import allocator
from up_trainer.engine.allocator import skip_reason
from up_trainer.engine.builder import build_trainer

# The shape of a CPU optimizer step: several 8 MiB buffers (gradients, update temporaries)
# allocated, written and freed together, again and again. Counted in a fresh process, since
# glibc's thresholds depend on the whole allocation history of the process.
STEP_PATTERN = textwrap.dedent("""
    import ctypes, resource, sys
    sys.path.insert(0, {repo!r})
    if sys.argv[1] == "tuned":
        from up_trainer.engine.allocator import tune_malloc
        print(tune_malloc())
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = 8 << 20

    def step():
        blocks = [libc.malloc(size) for _ in range(4)]
        for b in blocks:
            ctypes.memset(b, 1, size)
        for b in blocks:
            libc.free(b)

    step(); step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        step()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
""")


def faults_per_step(mode):
    # glibc's own malloc with its defaults, whatever allocator settings the test runner has.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
    out = subprocess.run([sys.executable, "-c", STEP_PATTERN.format(repo=REPO), mode], env=env,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return float(out[-2]), out[0]


@pytest.mark.skipif(skip_reason(environ={}) is not None or allocator._glibc() is None, reason="glibc only")
def test_tuned_heap_keeps_step_buffers_mapped():
    plain, _ = faults_per_step("plain")
    tuned, said = faults_per_step("tuned")
    assert said == "malloc: mmap threshold 32 MiB, trim threshold 1024 MiB"
    # 4 x 8 MiB written per step is 8,192 pages: untuned glibc trims them away and faults them
    # back on every step; tuned, they stay mapped.
    assert plain > 4000
    assert tuned < 100


@pytest.mark.parametrize("environ, platform, reason", [
    ({}, "linux", None),
    ({}, "darwin", "not glibc (darwin)"),
    ({"MALLOC_TRIM_THRESHOLD_": "0"}, "linux", "MALLOC_TRIM_THRESHOLD_ is set"),
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, "linux", "GLIBC_TUNABLES sets glibc.malloc"),
    ({"GLIBC_TUNABLES": "glibc.rtld.nns=2"}, "linux", None),
    ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, "linux", "jemalloc is preloaded"),
])
def test_users_own_allocator_choice_is_left_alone(environ, platform, reason):
    assert skip_reason(environ=environ, platform=platform) == reason


def test_switch_off_in_yaml(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("up_trainer.engine.builder.tune_malloc", lambda: calls.append(1))
    for value in (False, True):
        path = write_cfg(tmp_path / f"c{value}.yaml", tiny_cfg(runtime={"seed": 0, "tune_malloc": value}))
        build_trainer(resolve_config(str(path), []), work_dir=str(tmp_path / f"run{value}"))
    assert calls == [1]
