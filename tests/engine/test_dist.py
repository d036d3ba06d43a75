"""Distributed training on CPU with gloo: launch modes, DDP equivalence, resume, signals,
failures, SLURM environment, gathered evaluation, launch scripts."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import REPO, SUBPROCESS_PATH, invoke, tiny_cfg, write_cfg
from up_trainer.data.sampler import ResumableSampler
from up_trainer.engine.distributed_launch import slurm_env
from up_trainer.engine.hostlist import expand_hostlist, slurm_hostnames
from up_trainer.errors import ConfigError

VENV_BIN = os.path.dirname(sys.executable)
TIMEOUT = 20  # runtime.dist_timeout of the multi-process runs, seconds


# -- pure parts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, hosts", [
    ("node[01-03,07],gpu-a[1-2]", ["node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a,b,c[5]", ["a", "b", "c5"]),
    ("localhost", ["localhost"]),
])
def test_hostlist_expansion(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("bad", ["node[01-03", "node]1[", "node[3-1]", "node[a-b]", ""])
def test_hostlist_rejects_malformed(bad):
    with pytest.raises(ConfigError, match="SLURM_NODELIST"):
        expand_hostlist(bad)


def test_scontrol_is_preferred_when_present(tmp_path, monkeypatch):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho from-scontrol-1\necho from-scontrol-2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert slurm_hostnames("node[1-5]") == ["from-scontrol-1", "from-scontrol-2"]


def test_slurm_env_from_simulated_task():
    environ = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
               "SLURM_NODELIST": "node[01-03,07],gpu-a[1-2]", "SLURM_JOB_ID": "123456",
               "SLURM_NTASKS_PER_NODE": "2(x4)", "PATH": ""}
    env = slurm_env(environ, ng=2, nm=4)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["NODE_RANK"]) == ("5", "8", "1", "2")
    assert env["MASTER_ADDR"] == "node01" and env["LOCAL_WORLD_SIZE"] == "2"
    assert env["MASTER_PORT"] == str(20000 + 123456 % 20000)  # same on every task of the job
    assert slurm_env(environ, port=29999, ng=2, nm=4)["MASTER_PORT"] == "29999"
    with pytest.raises(ConfigError, match="SLURM_PROCID"):
        slurm_env({"SLURM_NTASKS": "2", "SLURM_NODELIST": "a"})


def test_sampler_deterministic_by_seed_and_epoch_and_resumable_per_rank():
    def shard(rank, world=3, epoch=4, seed=7, start=0, pad=True):
        s = ResumableSampler(50, shuffle=True, seed=seed, rank=rank, world_size=world, pad=pad)
        s.set_epoch(epoch, start)
        return list(s)

    assert shard(0) == shard(0) and shard(0) != shard(0, epoch=5) and shard(0) != shard(0, seed=8)
    shards = [shard(r) for r in range(3)]
    assert {len(s) for s in shards} == {17}  # padded: equal batches on every rank
    assert set().union(*map(set, shards)) == set(range(50))
    unpadded = [shard(r, pad=False) for r in range(3)]
    assert sorted(sum(unpadded, [])) == list(range(50))  # evaluation: each sample exactly once
    for r in range(3):  # mid-epoch resume: the rest of this rank's shard, nothing else
        s = ResumableSampler(50, seed=7, rank=r, world_size=3)
        s.set_epoch(4, 10)
        assert list(s) == shards[r][10:] and len(s) == 7
    # the ranks' strided shards of batch k together form the single-process batch k
    one = shard(0, world=1)
    two = [shard(r, world=2) for r in range(2)]
    assert sorted(two[0][:4] + two[1][:4]) == sorted(one[:8])


# -- multi-process runs --------------------------------------------------------------------------
def test_a_finished_runs_garbage_is_collected_before_the_group_is_left(monkeypatch):
    """The trainer ends in reference cycles holding the DDP reducer and its process group; left
    to the interpreter's exit, their teardown could abort a gloo rank after a finished run."""
    import gc
    import weakref

    import torch.distributed as torch_dist

    from up_trainer.engine import distributed_launch

    class Trainer:  # stands for the finished trainer: hooks <-> trainer
        pass

    refs, collected_at_destroy = [], []

    def run():
        trainer = Trainer()
        trainer.hooks = [trainer]
        refs.append(weakref.ref(trainer))
        return {"top1": 1.0}

    monkeypatch.setattr(distributed_launch, "init_group", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch_dist, "destroy_process_group", lambda: collected_at_destroy.append(refs[0]() is None))
    gc.disable()  # only the explicit collection may free the cycle
    try:
        assert distributed_launch.run_in_group(run, {}, timeout=1) == {"top1": 1.0}
    finally:
        gc.enable()
    assert collected_at_destroy == [True]


def dist_cfg(tmp_path, name, batch_size=8, **over):
    cfg = tiny_cfg(runtime={"seed": 3, "imports": ["dist_plugin"], "dist_timeout": TIMEOUT},
                   dataset={"train": {"type": "digits", "kwargs": {"split": "train", "subset": 128}},
                            "test": {"type": "digits", "kwargs": {"split": "test", "subset": 45}},
                            "batch_size": batch_size, "test_batch_size": 8},
                   trainer={"max_epoch": 4, "optimizer": {"type": "SGD", "kwargs": {"lr": 0.1, "momentum": 0.9}}},
                   net={"type": "dist_mlp", "kwargs": {}}, **over)
    return write_cfg(tmp_path / f"{name}.yaml", cfg)


def child_env(**extra):
    env = dict(os.environ, PYTHONPATH=SUBPROCESS_PATH, OMP_NUM_THREADS="1",
               TORCHRUN=os.path.join(VENV_BIN, "torchrun"), **extra)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def up_cmd(*args):
    return [sys.executable, "-m", "up_trainer", "train", *map(str, args)]


def run(cmd, timeout=240, **kw):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, **kw)
    return res


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def tensors(obj, prefix=""):
    """Every tensor of a nested checkpoint dict, by dotted key."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    out = {}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else []
    for k, v in items:
        out.update(tensors(v, f"{prefix}.{k}"))
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """1 process x batch 16 for 2 epochs, and dist_train.sh (torchrun) 2 x batch 8 for 4 epochs."""
    tmp = tmp_path_factory.mktemp("dist")
    single = tmp / "single"
    res1 = invoke(["train", "--config", dist_cfg(tmp, "one", batch_size=16), "--work-dir", single,
                   "--opts", "trainer.max_epoch=2"])
    assert res1.exit_code == 0, (res1.stderr, res1.exception)
    two = tmp / "two"
    res2 = run(["bash", os.path.join(REPO, "scripts", "dist_train.sh"), "2", dist_cfg(tmp, "two"),
                "--work-dir", two], env=child_env())
    assert res2.returncode == 0, res2.stderr[-3000:]
    return tmp, single, two, res2


def test_two_ranks_equal_one_rank_with_double_batch(trained):
    _, single, two, res = trained
    a = load(single / "checkpoints" / "ckpt_e2.pth")
    b = load(two / "checkpoints" / "ckpt_e2.pth")
    assert a["iter"] == b["iter"] == 16  # 128 samples / 16 per step, 2 epochs
    for k, v in a["model"].items():
        assert torch.allclose(v, b["model"][k], atol=1e-5, rtol=0), (k, (v - b["model"][k]).abs().max())
    # only rank 0 logs and writes: one config, one log line per eval, no duplicated checkpoints
    assert res.stdout.count("eval epoch 4") == 1
    # (.up.lock: the directory lock every written directory holds)
    assert sorted(f for f in os.listdir(two / "checkpoints") if not f.startswith(".")) == sorted(
        ["ckpt_e1.pth", "ckpt_e2.pth", "ckpt_e3.pth", "ckpt_e4.pth", "ckpt_best.pth", "ckpt_latest.pth"])


def test_ddp_resume_under_simulated_slurm_is_bitwise(trained):
    """2 epochs (torchrun) + resume to 4 as two srun tasks (SLURM_* set, compressed node list)
    == 4 epochs straight."""
    tmp, _, two, _ = trained
    resumed = tmp / "resumed"
    port = 20000 + os.getpid() % 20000
    procs = [subprocess.Popen(up_cmd("--config", dist_cfg(tmp, "two"), "--work-dir", resumed, "--launch", "slurm",
                                     "--ng", 1, "--nm", 2, "--port", port,
                                     "--resume", two / "checkpoints" / "ckpt_e2.pth"),
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=child_env(SLURM_PROCID=str(r), SLURM_NTASKS="2", SLURM_LOCALID="0",
                                            SLURM_NODEID=str(r), SLURM_JOB_ID="77",
                                            SLURM_NODELIST="localhost,node[01-03,07],gpu-a[1-2]"))
             for r in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert "eval epoch 4" in outs[0][0] and "eval epoch" not in outs[1][0]  # rank 1 stays quiet
    straight, again = load(two / "checkpoints" / "ckpt_e4.pth"), load(resumed / "checkpoints" / "ckpt_e4.pth")
    assert straight["iter"] == again["iter"] == 32
    # every rank continued its own RNG stream (rank 1's differs from rank 0's)
    assert len(straight["rng_ranks"]) == 2
    assert not torch.equal(straight["rng_ranks"][0]["torch"], straight["rng_ranks"][1]["torch"])
    for part in ("model", "optimizer", "rng_ranks"):
        x, y = tensors(straight[part]), tensors(again[part])
        assert x.keys() == y.keys() and x
        for k in x:
            assert torch.equal(x[k], y[k]), (part, k)


def test_gathered_evaluation_equals_one_process(trained):
    """45 test samples sharded 23 + 22 over 2 ranks and gathered: the metrics the 2-rank run
    recorded at epoch 4 equal a 1-process evaluation of the same weights, sample for sample."""
    tmp, _, two, _ = trained
    ckpt = two / "checkpoints" / "ckpt_e4.pth"
    one = invoke(["train", "--config", dist_cfg(tmp, "two"), "--work-dir", tmp / "eval1", "-e", "--resume", ckpt])
    assert one.exit_code == 0, (one.stderr, one.exception)
    single = json.loads((tmp / "eval1" / "results_dir" / "metrics.json").read_text())
    gathered = load(ckpt)["state"]["metrics"]
    # val_loss sums per-sample losses whose logits came from batches of other sizes: equal to
    # float rounding, not bit for bit; every count-based metric is exact.
    assert single.pop("val_loss") == pytest.approx(gathered.pop("val_loss"), rel=1e-6)
    assert single == gathered and single["num_samples"] == 45


def _start_paced(tmp_path, name):
    markers = tmp_path / f"{name}-markers"
    hook = {"type": "test_pace", "kwargs": {"delay": 0.15, "at": 3, "marker_dir": str(markers)}}
    cfg = dist_cfg(tmp_path, name, hooks=[hook], default_hooks={"best": None})
    proc = subprocess.Popen(up_cmd("--config", cfg, "--work-dir", tmp_path / name, "--launch", "pytorch",
                                   "--ng", 2), cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    marker = markers / "rank1.ready"
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "rank 1 never reached iteration 3"
        time.sleep(0.05)
    time.sleep(0.05)
    return proc, int(marker.read_text())


def test_sigterm_to_one_rank_saves_once_and_every_rank_exits_143(tmp_path):
    proc, pid1 = _start_paced(tmp_path, "term")
    os.kill(pid1, signal.SIGTERM)
    out, err = proc.communicate(timeout=2 * TIMEOUT + 30)
    assert proc.returncode == 143, err[-3000:]
    assert "all 2 ranks exited with exit code 143" in err
    snaps = [f for f in os.listdir(tmp_path / "term" / "checkpoints") if "-i" in f and not f.startswith(".")]
    assert len(snaps) == 1, snaps
    ckpt = load(tmp_path / "term" / "checkpoints" / snaps[0])
    assert snaps[0] == f"ckpt_e{ckpt['epoch']}-i{ckpt['iter']}.pth" and ckpt["iter"] >= 3


def test_killed_rank_makes_the_others_fail_within_the_timeout(tmp_path):
    proc, pid1 = _start_paced(tmp_path, "kill")
    t0 = time.monotonic()
    os.kill(pid1, signal.SIGKILL)
    out, err = proc.communicate(timeout=2 * TIMEOUT + 30)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert "rank 1 failed first with exit code 137 (SIGKILL)" in err, err[-3000:]
    assert "rank 0:" in err  # rank 0 failed as well, on its own, rather than being left hanging
    assert elapsed < TIMEOUT + 10, elapsed


# -- scripts -------------------------------------------------------------------------------------
@pytest.mark.parametrize("script", ["train.sh", "test.sh", "dist_train.sh", "dist_test.sh"])
def test_scripts_parse(script):
    assert subprocess.run(["bash", "-n", os.path.join(REPO, "scripts", script)]).returncode == 0


def test_srun_scripts_build_the_slurm_command(tmp_path):
    fake = tmp_path / "srun"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = dict(os.environ, SRUN=str(fake), PYTHON="py", PORT="23456")
    out = run(["bash", os.path.join(REPO, "scripts", "test.sh"), "gpu", "2", "4", "c.yaml", "w.pth",
               "--opts", "a=1"], env=env)
    assert out.returncode == 0, out.stderr
    args = out.stdout.split("\n")
    assert {"--partition=gpu", "--nodes=2", "--ntasks=8", "--ntasks-per-node=4", "--gres=gpu:4"} <= set(args)
    tail = args[args.index("py"):]
    assert tail[:-1] == ["py", "-m", "up_trainer", "train", "--launch", "slurm", "--nm", "2", "--ng", "4",
                         "--port", "23456", "--config", "c.yaml", "--evaluate", "--resume", "w.pth", "--opts", "a=1"]
    usage = run(["bash", os.path.join(REPO, "scripts", "train.sh"), "gpu"], env=env)
    assert usage.returncode == 2 and "usage" in usage.stderr
