"""Config and input mistakes: each exits 2 with one line naming the key path, no traceback."""
import copy
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO, tiny_cfg, write_cfg
from up_trainer.errors import ConfigError


def mutate(fn):
    def build(tmp_path):
        cfg = copy.deepcopy(tiny_cfg())
        fn(cfg)
        return write_cfg(tmp_path / "cfg.yaml", cfg)
    return build


def text(body):
    def build(tmp_path):
        p = tmp_path / "cfg.yaml"
        p.write_text(body)
        return str(p)
    return build


def _set(path, value):
    def fn(cfg):
        node = cfg
        *parents, last = path
        for k in parents:
            node = node[k]
        node[last] = value
    return fn


def _del(path):
    def fn(cfg):
        node = cfg
        *parents, last = path
        for k in parents:
            node = node[k]
        del node[last]
    return fn


def _hooks(entries):
    return _set(["hooks"], entries)


def _cls_meta(tmp_path):
    cfg = tiny_cfg()
    cfg["dataset"]["train"] = {"type": "cls", "kwargs": {"meta_file": str(tmp_path / "missing.txt"),
                                                          "image_dir": str(tmp_path)}}
    return write_cfg(tmp_path / "cfg.yaml", cfg)


def _base_cycle(tmp_path):
    (tmp_path / "b.yaml").write_text("_base_: cfg.yaml\n")
    (tmp_path / "cfg.yaml").write_text("_base_: b.yaml\n")
    return str(tmp_path / "cfg.yaml")


def _corrupt_ckpt(tmp_path):
    (tmp_path / "bad.pth").write_bytes(b"PK\x03\x04 this is not a checkpoint")
    return write_cfg(tmp_path / "cfg.yaml", tiny_cfg())


train = ["train"]
CASES = [
    ("unknown section", text("trainr: {max_epoch: 1}\n"), train, [], "trainr: unknown section"),
    ("unknown trainer key", mutate(_set(["trainer", "max_epochs"], 3)), train, [], "trainer.max_epochs: unknown key"),
    ("unknown saver key", mutate(_set(["saver", "save_dirr"], "x")), train, [], "saver.save_dirr: unknown key"),
    ("unknown runtime key", mutate(_set(["runtime", "sead"], 1)), train, [], "runtime.sead: unknown key"),
    ("string for int", mutate(_set(["trainer", "max_epoch"], "ten")), train, [], "trainer.max_epoch: expected int"),
    ("bool for int", mutate(_set(["trainer", "test_freq"], True)), train, [], "trainer.test_freq: expected int"),
    ("below minimum", mutate(_set(["trainer", "save_freq"], 0)), train, [], "trainer.save_freq: must be >= 1"),
    ("bad choice", mutate(_set(["runtime", "device"], "tpu")), train, [], "runtime.device: 'tpu' is not one of"),
    ("missing required", mutate(_del(["trainer", "max_epoch"])), train, [], "trainer.max_epoch: required key"),
    ("missing net", mutate(_del(["net"])), train, [], "net: required section is missing"),
    ("no datasets", mutate(_set(["dataset"], {"batch_size": 4})), train, [], "dataset: needs at least one"),
    ("unknown hook type", mutate(_hooks([{"type": "auto_save_bset"}])), train, [],
     "hooks[0].type: unknown hook type 'auto_save_bset'; did you mean 'auto_save_best'"),
    ("misspelt hook kwarg", mutate(_hooks([{"type": "auto_save_best", "kwargs": {"mod": "max"}}])), train, [],
     "hooks[0].kwargs.mod: unknown argument"),
    ("hook kwarg type", mutate(_hooks([{"type": "auto_save_best", "kwargs": {"metric": 5}}])), train, [],
     "hooks[0].kwargs.metric: expected"),
    ("hook kwarg value", mutate(_hooks([{"type": "auto_save_best", "kwargs": {"mode": "maxx"}}])), train, [],
     "hooks[0].kwargs.mode: expected max or min"),
    ("bad priority name", mutate(_hooks([{"type": "auto_save_best", "priority": "HIGHISH"}])), train, [],
     "hooks[0].priority: unknown priority"),
    ("priority out of range", mutate(_hooks([{"type": "auto_save_best", "priority": 200}])), train, [],
     "hooks[0].priority: priority 200 is outside 0-100"),
    ("hook entry not a mapping", mutate(_hooks(["auto_save_best"])), train, [], "hooks[0]: expected a {type, kwargs}"),
    ("hooks not a list", mutate(_hooks({"type": "auto_save_best"})), train, [], "hooks: expected a list"),
    ("hook entry unknown key", mutate(_hooks([{"type": "auto_save_best", "kwarg": {}}])), train, [],
     "hooks[0].kwarg: unknown key"),
    ("unknown default hook", mutate(_set(["default_hooks"], {"loger": None})), train, [],
     "default_hooks.loger: unknown default hook"),
    ("unknown model type", mutate(_set(["net", "type"], "resnet19")), train, [],
     "net.type: unknown model type 'resnet19'"),
    ("unknown model kwarg", mutate(_set(["net", "kwargs", "num_class"], 10)), train, [],
     "net.kwargs.num_class: unknown argument"),
    ("unknown dataset type", mutate(_set(["dataset", "train", "type"], "digit")), train, [],
     "dataset.train.type: unknown dataset type 'digit'"),
    ("unknown dataset kwarg", mutate(_set(["dataset", "train", "kwargs", "splitt"], "train")), train, [],
     "dataset.train.kwargs.splitt: unknown argument"),
    ("unknown evaluator", mutate(_set(["dataset", "evaluator"], {"type": "imagenett"})), train, [],
     "dataset.evaluator.type: unknown evaluator type"),
    ("missing meta file", _cls_meta, train, [], "missing.txt"),
    ("unknown optimizer", mutate(_set(["trainer", "optimizer"], {"type": "SGDD", "kwargs": {"lr": 0.1}})), train, [],
     "trainer.optimizer.type: unknown optimizer 'SGDD'"),
    ("bad optimizer kwarg", mutate(_set(["trainer", "optimizer"], {"type": "SGD", "kwargs": {"lrr": 0.1}})), train,
     [], "trainer.optimizer.kwargs.lrr: unknown argument"),
    ("unknown lr scheduler", mutate(_set(["trainer", "lr_scheduler"], {"type": "CosineLR"})), train, [],
     "trainer.lr_scheduler"),
    ("bad amp dtype", mutate(_set(["runtime", "amp"], {"enable": True, "dtype": "fp8"})), train, [],
     "runtime.amp.dtype: unknown dtype 'fp8'"),
    ("best metric not produced", mutate(_hooks([{"type": "auto_save_best", "kwargs": {"metric": "top7"}}])), train,
     [], "auto_save_best.kwargs.metric: the evaluator does not produce 'top7'"),
    ("bad import", mutate(_set(["runtime", "imports"], ["no_such_module_xyz"])), train, [],
     "runtime.imports[0]: cannot import module 'no_such_module_xyz'"),
    ("config file missing", lambda p: str(p / "nope.yaml"), train, [], "config file not found"),
    ("yaml syntax", text("trainer: {max_epoch: 1\n"), train, [], "invalid YAML"),
    ("python tag", text("trainer: !!python/object/apply:os.system ['true']\n"), train, [],
     "python object tags are not allowed"),
    ("top level list", text("- a\n- b\n"), train, [], "the top level must be a mapping"),
    ("missing _base_", text("_base_: nothere.yaml\n"), train, [], "_base_ file not found: nothere.yaml"),
    ("_base_ cycle", _base_cycle, train, [], "inheritance cycle"),
    ("bad opts path", mutate(lambda c: None), train, ["--opts", "hooks.nope.kwargs.x=1"], "hooks.nope: no hook"),
    ("bad opts value", mutate(lambda c: None), train, ["--opts", "trainer.max_epoch=abc"],
     "trainer.max_epoch: expected int"),
    ("opts without =", mutate(lambda c: None), train, ["--opts", "trainer.max_epoch"], "expected KEY=VALUE"),
    ("missing resume", mutate(lambda c: None), train, ["--resume", "/nonexistent/ckpt.pth"],
     "--resume: checkpoint not found"),
    ("corrupt resume", _corrupt_ckpt, train, ["--resume", "{tmp}/bad.pth"], "bad.pth is truncated or corrupt"),
    ("missing resume_model", mutate(_set(["saver", "resume_model"], "/nonexistent/r.pth")), train, [],
     "saver.resume_model: checkpoint not found"),
    ("evaluate without a test set", mutate(_set(["dataset", "test"], None)), train, ["-e"],
     "dataset.test: evaluation needs a test dataset"),
    ("bad flops size", mutate(lambda c: None), ["flops"], ["--input-size", "1,8"], "--input-size: expected C,H,W"),
]


@pytest.mark.parametrize("name,build,cmd,extra,expected", CASES, ids=[c[0] for c in CASES])
def test_mistake_exits_2_with_one_line(tmp_path, run_up, name, build, cmd, extra, expected):
    cfg_path = build(tmp_path)
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    args = [*cmd, "--config", cfg_path, *extra]
    if cmd == train:
        args += ["--work-dir", str(tmp_path / "run")]
    res = run_up(args)
    assert res.exit_code == 2, (res.exit_code, res.stderr, res.exception)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("up: error: "), res.stderr
    assert expected in lines[0], lines[0]
    assert "Traceback" not in res.stderr + res.stdout


def test_at_least_30_distinct_mistakes():
    assert len({c[0] for c in CASES}) >= 30


def test_real_process_prints_no_traceback(tmp_path):
    cfg = tiny_cfg()
    cfg["trainer"]["max_epochs"] = 3
    path = write_cfg(tmp_path / "cfg.yaml", cfg)
    proc = subprocess.run([sys.executable, "-m", "up_trainer", "train", "--config", path], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("up: error: trainer.max_epochs: unknown key (did you mean 'max_epoch'?)")


def test_saved_checkpoints_survive_a_bad_resume(tmp_path, run_up):
    """A failing start (bad --resume) must not touch what is already saved."""
    run_dir = tmp_path / "run"
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True)
    torch.save({"x": torch.ones(2)}, ckpt_dir / "ckpt_e1.pth")
    before = sorted(os.listdir(ckpt_dir))
    path = write_cfg(tmp_path / "cfg.yaml", tiny_cfg())
    res = run_up(["train", "--config", path, "--work-dir", run_dir, "--resume", tmp_path / "nope.pth"])
    assert res.exit_code == 2
    assert sorted(os.listdir(ckpt_dir)) == before


def test_priority_is_a_key_of_hook_entries_only():
    """priority (and name) belong to hook entries; on any other entry (a dataset, a model) they
    are a mistake."""
    from up_trainer.registry import DATASETS, HOOKS, MODELS

    with pytest.raises(ConfigError, match=r"^dataset\.train\.priority: unknown key"):
        DATASETS.build({"type": "digits", "priority": 10}, "dataset.train")
    with pytest.raises(ConfigError, match=r"^net\.name: unknown key"):
        MODELS.build({"type": "resnet18", "name": "x"}, "net")
    with pytest.raises(ConfigError, match=r"^hooks\[0\]\.nmae: unknown key \(did you mean 'name'\?\)"):
        HOOKS.build({"type": "nan_guard", "nmae": "guard"}, "hooks[0]")  # name: a hook's state key (docs/hooks.rst)
    assert HOOKS.build({"type": "nan_guard", "priority": 10}, "hooks[0]").policy == "skip"


def test_up_hooks_lists_hooks_registered_through_runtime_imports(tmp_path):
    """`up hooks --config CFG` imports the config's runtime.imports before listing."""
    (tmp_path / "listed_plugin.py").write_text(
        "from up_trainer.hooks.base import Hook\n"
        "from up_trainer.registry import HOOKS\n\n\n"
        "@HOOKS.register('listed_by_config')\n"
        "class ListedByConfig(Hook):\n"
        "    '''Registered by a module only the config names.'''\n\n"
        "    def __init__(self, every: int = 3):\n"
        "        super().__init__()\n")
    cfg = write_cfg(tmp_path / "c.yaml", dict(tiny_cfg(), runtime={"imports": ["listed_plugin"]}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, str(tmp_path)]))

    def up_hooks(*args):
        return subprocess.run([sys.executable, "-m", "up_trainer", "hooks", *args], capture_output=True, text=True,
                              env=env, timeout=120)

    assert "listed_by_config" not in up_hooks().stdout
    res = up_hooks("--config", cfg)
    assert res.returncode == 0, res.stderr
    assert "listed_by_config  priority NORMAL (50)" in res.stdout and "every: 3" in res.stdout
    assert "grad_clipper" in res.stdout  # the built-in ones as well
    res = up_hooks("--config", tmp_path / "missing.yaml")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
