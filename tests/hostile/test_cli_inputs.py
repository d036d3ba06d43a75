"""Inputs the user names on the command line or in a config: anything but a regular file is
refused by the one opener (up_trainer/paths.py) in one line, never waited on; bad values,
click's own usage errors and long quoted values each make one ``up: error:`` line, exit 2."""
import os
import pickle
import re
import warnings

import yaml

from conftest import invoke
from hostile_helpers import assert_one_line, fifo, fingerprint, seed_checkpoint, tiny_cfg, trained_run, write_yaml  # noqa: F401


def test_fifo_as_config_and_as_base(tmp_path):
    with fifo(tmp_path / "pipe.yaml") as pipe:
        assert_one_line(invoke(["config", "--config", pipe]), f"config file {pipe} is a FIFO (named pipe), "
                        "not a regular file")
        child = write_yaml(tmp_path / "child.yaml", {"_base_": "pipe.yaml"})
        assert_one_line(invoke(["train", "--config", child, "--work-dir", tmp_path]),
                        f"_base_ file {pipe} is a FIFO (named pipe), not a regular file")
    assert sorted(os.listdir(tmp_path)) == ["child.yaml", "pipe.yaml"]  # nothing written


def test_fifo_as_checkpoint_and_as_pretrained_weights(tmp_path, trained_run):  # noqa: F811
    before = seed_checkpoint(tmp_path / "checkpoints")
    with fifo(tmp_path / "pipe.pth") as pipe:
        cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(saver={"save_dir": "checkpoints",
                                                                "pretrain_model": str(pipe)}))
        assert_one_line(invoke(["eval", "--config", cfg, "--checkpoint", pipe]), f"{pipe} is a FIFO")
        # in a run dir of its own: tmp_path holds a run's checkpoints, a fresh start there is refused first
        assert_one_line(invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run"]),
                        f"saver.pretrain_model: weights file {pipe} is a FIFO (named pipe), not a regular file")
        assert_one_line(invoke(["train", "--config", cfg, "--work-dir", tmp_path, "--resume", pipe]),
                        f"--resume: checkpoint {pipe} is a FIFO (named pipe), not a regular file")
    assert fingerprint(tmp_path / "checkpoints") == before


def test_fifo_as_predict_input(tmp_path, trained_run):  # noqa: F811
    work, cfg = trained_run
    (tmp_path / "imgs").mkdir()
    with fifo(tmp_path / "imgs" / "a.png") as pipe:
        res = invoke(["predict", "--config", cfg, "--checkpoint", work / "checkpoints" / "ckpt_e1.pth",
                      "--input", tmp_path / "imgs", "--out", tmp_path / "out"])
        assert_one_line(res, f"--input: {pipe} is a FIFO (named pipe), not a regular file")
    assert not (tmp_path / "out").exists()


def test_raw_pickle_checkpoint_is_one_line_and_no_warning(tmp_path, trained_run):  # noqa: F811
    """torch warns about a plain pickle's protocol before refusing it; Python prints warnings on
    stderr, so none may be issued (recorded here: pytest would otherwise keep them itself)."""
    _, cfg = trained_run
    raw = tmp_path / "raw.pth"
    raw.write_bytes(pickle.dumps({"model": {"w": [1.0, 2.0]}}, protocol=4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = invoke(["eval", "--config", cfg, "--checkpoint", raw])
    assert_one_line(res, f"{raw}: not a file torch.save writes (a plain pickle is refused")
    assert not [w for w in caught if "pickle" in str(w.message)], [str(w.message) for w in caught]


# -- values ------------------------------------------------------------------------------------------
def test_seeds_beyond_64_bits(tmp_path):
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run", "--seed", str(2**64)])
    assert_one_line(res, "Invalid value for '--seed'", "train --help)")
    assert not (tmp_path / "run").exists()
    for key in ("runtime.seed", "runtime.random_seed"):
        assert_one_line(invoke(["config", "--config", cfg, "--opts", f"{key}={2**64}"]),
                        f"{key}: must be <= {2**63 - 1}, got {2**64}")
    assert_one_line(invoke(["data", "digits-det", "--out", tmp_path / "d", "--seed", "-1"]),
                    "Invalid value for '--seed'")


def test_relative_module_in_runtime_imports(tmp_path):
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    for name in ("..foo", "a..b", "my-pkg"):
        assert_one_line(invoke(["config", "--config", cfg, "--opts", f"runtime.imports=[{name!r}]"]),
                        f"runtime.imports[0]: {name!r} is not an absolute module name")


def test_click_usage_errors_are_one_line(tmp_path):
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    assert_one_line(invoke(["train", "--config", cfg, "--bogus"]), "No such option '--bogus'")
    assert_one_line(invoke(["train"]), "Missing option '--config'", "train --help)")
    assert_one_line(invoke(["eval", "--config", cfg, "--checkpoint", "x", "--device", "tpu"]),
                    "Invalid value for '--device'")
    assert_one_line(invoke(["nosuchcommand"]), "No such command 'nosuchcommand'")


def test_long_values_in_messages_are_cut_to_200_characters(tmp_path):
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    long = "x" * 5000
    for opt in (f"net.type={long}", f"runtime.imports=[{long}]", f"hooks.{long}.kwargs.a=1"):
        line = assert_one_line(invoke(["config", "--config", cfg, "--opts", opt]))
        runs = [len(run) for run in re.findall(r"'?[x.]{50,}'?", line)]  # each quoted value, cut
        assert runs and max(runs) <= 200, (runs, line[:300])
        assert "x" * 200 not in line


def test_opts_hook_list_keeps_the_default_hooks(tmp_path):
    """--opts 'hooks=[...]' and the same list in the file give the same hooks: the defaults
    (logger, auto_checkpoint, best, insight) join both."""
    clipper = [{"type": "grad_clipper", "kwargs": {"max_norm": 5}}]
    in_file = write_yaml(tmp_path / "file.yaml", tiny_cfg(hooks=clipper))
    plain = write_yaml(tmp_path / "plain.yaml", tiny_cfg())

    def hooks(res):
        assert res.exit_code == 0, (res.stderr, res.exception)
        return yaml.safe_load(res.stdout)["hooks"]

    from_file = hooks(invoke(["config", "--config", in_file]))
    from_opts = hooks(invoke(["config", "--config", plain, "--opts",
                              "hooks=[{type: grad_clipper, kwargs: {max_norm: 5}}]"]))
    assert from_opts == from_file
    assert {"auto_checkpoint", "auto_save_best", "grad_clipper"} <= {h["type"] for h in from_opts}
    tuned = hooks(invoke(["config", "--config", plain, "--opts", "hooks=[{type: grad_clipper}]",
                          "hooks.grad_clipper.kwargs.max_norm=3", "hooks.auto_checkpoint.kwargs.signals=[SIGTERM]"]))
    assert tuned[0] == {"type": "grad_clipper", "kwargs": {"max_norm": 3}}
    assert {"type": "auto_checkpoint", "kwargs": {"signals": ["SIGTERM"]}} in tuned
