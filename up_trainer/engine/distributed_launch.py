"""Start the worker function in one process or in a process group.

``--launch none``    one process, or the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
                     MASTER_ADDR, MASTER_PORT) when it is present.
``--launch pytorch`` spawn ``--ng`` worker processes on this node, rendezvous on a free port.
``--launch slurm``   one process per srun task; rank, world and master come from SLURM_*.

Every rank initialises the group with ``runtime.dist_timeout``, so a rank that dies makes the
others fail inside that time instead of hanging. The spawning parent forwards SIGINT, SIGTERM,
SIGUSR1 and SIGHUP to its workers and exits with their exit code, naming the rank that failed.
"""
import datetime
import gc
import os
import pickle
import signal
import socket
import subprocess
import sys
import time

from ..errors import ConfigError, TrainingInterrupted

FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1", "SIGHUP")
RANK_FLAG = "--up-rank="  # marks spawned workers on their command line (ps, tests)


class WorkerFailed(TrainingInterrupted):
    """A spawned rank exited non-zero; the CLI exits with ``exit_code`` and prints the message."""


def launch_workers(fn, kwargs, *, launch="none", ng=1, nm=1, port=None, runtime_cfg=None):
    timeout = float((runtime_cfg or {}).get("dist_timeout", 1800))
    device = kwargs.get("device") or (runtime_cfg or {}).get("device", "auto")
    if launch == "pytorch":
        if nm != 1:
            raise ConfigError("--nm", "--launch pytorch spawns processes on this node only",
                              "use --launch slurm or torchrun --nnodes for several nodes")
        if ng > 1:
            return spawn_workers(fn, kwargs, ng=ng, port=port, timeout=timeout)
        # --ng 1: this process is a group of one, DDP-wrapped (NCCL on a GPU) as every rank of a
        # bigger run; the way to check a multi-GPU set-up on a single GPU.
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port or free_port()))
        return run_in_group(fn, kwargs, timeout=timeout, device=device, group_of_one=True)
    elif launch == "slurm":
        os.environ.update(slurm_env(os.environ, port=port, ng=ng, nm=nm))
    elif launch != "none":
        raise ConfigError("--launch", f"unknown launch mode {launch!r}", "none, pytorch or slurm")
    return run_in_group(fn, kwargs, timeout=timeout, device=device)


# -- one rank ----------------------------------------------------------------------------------
def backend_for(device):
    """nccl when this rank trains on CUDA, gloo otherwise (CPU runs, or --device cpu on a GPU box)."""
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        return "gloo"
    return "nccl"


def init_group(timeout, device="auto", group_of_one=False):
    """Join the group the RANK/WORLD_SIZE/MASTER_* environment describes; no-op for a world of
    one unless ``group_of_one`` (``--launch pytorch --ng 1``)."""
    import torch
    import torch.distributed as torch_dist

    if torch_dist.is_initialized() or (int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not group_of_one):
        return False
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise ConfigError("--launch", f"WORLD_SIZE > 1 but {', '.join(missing)} not set",
                          "launch with torchrun, --launch pytorch or --launch slurm")
    backend = backend_for(device)
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local % torch.cuda.device_count())  # device = local rank
    torch_dist.init_process_group(backend=backend, init_method="env://",
                                  timeout=datetime.timedelta(seconds=timeout))
    return True


def run_in_group(fn, kwargs, *, timeout, device="auto", group_of_one=False):
    import torch.distributed as torch_dist

    joined = init_group(timeout, device, group_of_one)
    result = fn(**kwargs)
    if joined:
        # The trainer is garbage now but held in reference cycles (hooks <-> trainer), and with
        # it the DDP reducer and its process group: collected here, while the interpreter is
        # whole. Left to the interpreter's exit, a gloo rank could abort (SIGABRT, "terminate
        # called without an active exception") after a finished run, about 1 run in 10 on a
        # loaded machine, and torchrun reported the job failed.
        gc.collect()
        # Only on success: tearing down after a failed collective can block (NCCL), and the
        # process is about to exit anyway.
        torch_dist.destroy_process_group()
    return result


# -- SLURM -------------------------------------------------------------------------------------
def slurm_env(environ, *, port=None, ng=1, nm=1):
    """RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* for this srun task, from its SLURM_* variables."""
    from .hostlist import slurm_hostnames

    need = {"SLURM_PROCID": environ.get("SLURM_PROCID"),
            "SLURM_NTASKS": environ.get("SLURM_NTASKS") or environ.get("SLURM_NPROCS"),
            "SLURM_NODELIST": environ.get("SLURM_NODELIST") or environ.get("SLURM_JOB_NODELIST")}
    missing = [k for k, v in need.items() if not v]
    if missing:
        raise ConfigError("--launch", f"slurm launch but {', '.join(missing)} not set",
                          "start the job step with srun (see scripts/train.sh)")
    hosts = slurm_hostnames(need["SLURM_NODELIST"])
    rank, world = int(need["SLURM_PROCID"]), int(need["SLURM_NTASKS"])
    local = int(environ.get("SLURM_LOCALID", rank % max(ng, 1)))
    if port is None:
        # Every task must pick the same port without talking to the others: derive it from the
        # job id, so two jobs sharing a node do not collide.
        port = int(environ.get("MASTER_PORT") or 20000 + int(environ.get("SLURM_JOB_ID", "0")) % 20000)
    if rank == 0 and (len(hosts) != nm or world != nm * ng):
        print(f"up: note: SLURM gives {world} tasks on {len(hosts)} node(s) while --nm {nm} --ng {ng} "
              f"implies {nm * ng} on {nm}; using SLURM's layout", file=sys.stderr)
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(environ.get("SLURM_NTASKS_PER_NODE", ng)).split("(")[0],
            "NODE_RANK": str(environ.get("SLURM_NODEID", "0")),
            "MASTER_ADDR": environ.get("MASTER_ADDR") or hosts[0], "MASTER_PORT": str(port)}


# -- spawn on this node -------------------------------------------------------------------------
def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_main():
    """Entry point of a spawned worker: read (fn, kwargs, timeout, device) from stdin and run it."""
    fn, kwargs, timeout, device = pickle.load(sys.stdin.buffer)
    from ..exits import run_safely  # same exit codes and one-line user errors as a plain `up train`

    run_safely(lambda: run_in_group(fn, kwargs, timeout=timeout, device=device))()


def _exit_code(returncode):
    return 128 - returncode if returncode < 0 else returncode  # killed by signal N -> 128 + N


def _describe(code):
    try:
        return f"exit code {code} ({signal.Signals(code - 128).name})" if code > 128 else f"exit code {code}"
    except ValueError:
        return f"exit code {code}"


def spawn_workers(fn, kwargs, *, ng, port=None, timeout=1800.0):
    """Run ``fn(**kwargs)`` in ``ng`` ranks; raise WorkerFailed naming the first rank that failed."""
    port = port or free_port()
    payload = pickle.dumps((fn, kwargs, timeout, kwargs.get("device")))
    procs = []
    for rank in range(ng):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ng), LOCAL_WORLD_SIZE=str(ng),
                   NODE_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        cmd = [sys.executable, "-c", "from up_trainer.engine.distributed_launch import child_main; child_main()",
               f"{RANK_FLAG}{rank}"]
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE)
        try:
            p.stdin.write(payload)
            p.stdin.close()
        except BrokenPipeError:
            pass  # the worker died at start-up; its exit code is reported below
        procs.append(p)

    def forward(signum, frame):
        for p in procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signum)
                except ProcessLookupError:
                    pass

    previous = {}
    for name in FORWARDED_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, forward)
    try:
        codes, order = _wait_all(procs, grace=timeout + 10)
    finally:
        for sig, prev in previous.items():
            signal.signal(sig, prev)
    failed = [(r, codes[r]) for r in order]
    if not failed:
        return None
    first_rank, first_code = failed[0]
    if len(failed) == ng and len({c for _, c in failed}) == 1:
        raise WorkerFailed(first_code, f"all {ng} ranks exited with {_describe(first_code)}")
    others = ", ".join(f"rank {r}: {_describe(c)}" for r, c in failed[1:]) or "the others exited 0"
    raise WorkerFailed(first_code, f"rank {first_rank} failed first with {_describe(first_code)} ({others})")


def _wait_all(procs, grace):
    """Exit codes in rank order. After the first failure the rest get ``grace`` seconds (their own
    collective timeout plus a margin) to notice and exit; then they are terminated, then killed."""
    codes = [None] * len(procs)
    order = []  # ranks in the order they were seen to fail, first failure first
    deadline = None
    killed_at = None
    while any(c is None for c in codes):
        for rank, p in enumerate(procs):
            if codes[rank] is None and p.poll() is not None:
                codes[rank] = _exit_code(p.returncode)
                if codes[rank] != 0:
                    order.append(rank)
                    if deadline is None:
                        deadline = time.monotonic() + grace
        now = time.monotonic()
        if deadline is not None and now > deadline and killed_at is None:
            for rank, p in enumerate(procs):
                if codes[rank] is None:
                    print(f"up: rank {rank} still running {grace:.0f}s after rank {order[0]} failed; "
                          f"terminating it", file=sys.stderr)
                    p.terminate()
            killed_at = now
        if killed_at is not None and now > killed_at + 10:
            for rank, p in enumerate(procs):
                if codes[rank] is None:
                    p.kill()
        time.sleep(0.05)
    return codes, order
