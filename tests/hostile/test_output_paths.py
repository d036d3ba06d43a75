"""Output paths through the one guard (up_trainer/paths.py): every command checks every path it
writes at start-up, before any work. An output is a directory (or a file) we may write, never
one of the inputs; a mistake is one ``up: error:`` line, exit 2, and every input and every
earlier file stays byte for byte as it was."""
import hashlib
import os
import subprocess
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from conftest import invoke
from hostile_helpers import assert_one_line, fingerprint, seed_checkpoint, tiny_cfg, trained_run, write_yaml  # noqa: F401
from up_trainer.config import resolve_config

CLS_CONFIG = "configs/cls/digits_resnet18.yaml"


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def tree_digest(folder):
    """{relative path: sha256} of every file under ``folder``."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            full = os.path.join(root, name)
            out[os.path.relpath(full, folder)] = digest(full)
    return out


@contextmanager
def read_only(path):
    """``path``, a directory nothing may be written in: a read-only bind mount as root (root
    writes through permissions), mode 0555 otherwise."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        done = subprocess.run(["mount", "--bind", "-o", "ro", str(path), str(path)], capture_output=True)
        if done.returncode != 0:
            pytest.skip("cannot bind-mount here")
        try:
            yield path
        finally:
            subprocess.run(["umount", "-l", str(path)], check=False)
    else:
        os.chmod(path, 0o555)
        try:
            yield path
        finally:
            os.chmod(path, 0o755)


@pytest.fixture(scope="module")
def cls_weights(tmp_path_factory):
    """Weights for the digits resnet18 config (untrained: predict only has to run)."""
    from up_trainer.tasks.net import build_model

    path = tmp_path_factory.mktemp("weights") / "w.pth"
    torch.save(build_model(resolve_config(CLS_CONFIG)["net"]).state_dict(), path)
    return str(path)


def images(folder, names, side=16):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in names:
        Image.fromarray(rng.integers(0, 255, (side, side), dtype=np.uint8)).save(folder / name)
    return folder


def predict(weights, input_path, out):
    return invoke(["predict", "--config", CLS_CONFIG, "--checkpoint", weights, "--input", input_path, "--out", out])


# -- up predict --------------------------------------------------------------------------------------
def test_predict_into_its_input_directory_is_refused(tmp_path, cls_weights):
    folder = images(tmp_path / "imgs", ["a.png", "b.jpg"])
    before = tree_digest(folder)
    assert_one_line(predict(cls_weights, folder, folder), f"--out: {folder} holds the input {folder / 'a.png'}")
    assert tree_digest(folder) == before  # the 16x16 inputs, not drawings over them
    one = folder / "a.png"
    assert_one_line(predict(cls_weights, one, folder), "holds the input")  # one file of it, too
    assert tree_digest(folder) == before


def test_predict_names_differ_by_source_extension(tmp_path, cls_weights):
    folder = images(tmp_path / "imgs", ["a.jpg", "a.png"])
    res = predict(cls_weights, folder, tmp_path / "out")
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert sorted(os.listdir(tmp_path / "out")) == ["a.jpg.png", "a.png.png", "predictions.jsonl"]
    records = [yaml.safe_load(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    assert [os.path.basename(r["png"]) for r in records] == ["a.jpg.png", "a.png.png"]


@pytest.mark.parametrize("kind", ["file", "read-only"])
def test_predict_out_that_cannot_be_a_directory(tmp_path, cls_weights, kind):
    folder = images(tmp_path / "imgs", ["a.png"])
    if kind == "file":
        (tmp_path / "taken").write_text("keep me")
        assert_one_line(predict(cls_weights, folder, tmp_path / "taken"), f"--out: {tmp_path / 'taken'} is a "
                        "regular file, not a directory")
        assert (tmp_path / "taken").read_text() == "keep me"
        return
    with read_only(tmp_path / "ro") as ro:
        assert_one_line(predict(cls_weights, folder, ro / "out"), f"--out: cannot write in {ro}: ")


# -- up export ---------------------------------------------------------------------------------------
def export(weights, out):
    return invoke(["export", "--config", CLS_CONFIG, "--checkpoint", weights, "--format", "torchscript",
                   "--out", out])


def test_export_out_that_cannot_be_written(tmp_path, cls_weights):
    (tmp_path / "folder").mkdir()
    assert_one_line(export(cls_weights, tmp_path / "folder"), f"--out: {tmp_path / 'folder'} is a directory")
    with read_only(tmp_path / "ro") as ro:
        assert_one_line(export(cls_weights, ro / "model.pt"), f"--out: cannot write in {ro}: ")
    before = digest(cls_weights)
    assert_one_line(export(cls_weights, cls_weights), "is the input")  # over the weights it reads
    assert digest(cls_weights) == before


# -- up data -----------------------------------------------------------------------------------------
def test_data_out_that_cannot_be_a_directory(tmp_path):
    (tmp_path / "taken").write_text("keep me")
    args = ["data", "digits-det", "--num-images", "1", "--num-val-images", "0", "--out"]
    assert_one_line(invoke([*args, tmp_path / "taken"]), f"--out: {tmp_path / 'taken'} is a regular file, "
                    "not a directory")
    assert (tmp_path / "taken").read_text() == "keep me"
    with read_only(tmp_path / "ro") as ro:
        assert_one_line(invoke([*args, ro / "set"]), f"--out: cannot write in {ro}: ")
        res = invoke([*args, tmp_path / "coco"])
        assert res.exit_code == 0, (res.stderr, res.exception)
        res = invoke(["data", "convert", "--from", "coco", "--to", "yolo", "--input",
                      tmp_path / "coco" / "annotations" / "instances_train.json", "--images",
                      tmp_path / "coco" / "images" / "train", "--out", ro / "yolo"])
        assert_one_line(res, f"--out: cannot write in {ro}: ")


# -- up train / up eval ------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["config", "_base_", "hard link"])
def test_run_dir_never_overwrites_the_config(tmp_path, where):
    run_dir = tmp_path / "exp"
    run_dir.mkdir()
    if where == "config":  # up train --config exp/config.yaml --work-dir exp
        cfg = write_yaml(run_dir / "config.yaml", tiny_cfg())
        user_file = run_dir / "config.yaml"
    elif where == "_base_":
        user_file = run_dir / "config.yaml"
        write_yaml(user_file, tiny_cfg())
        cfg = write_yaml(tmp_path / "child.yaml", {"_base_": str(user_file)})
    else:  # another name for the same file, where config.yaml is written
        cfg = write_yaml(tmp_path / "mine.yaml", tiny_cfg())
        os.link(cfg, run_dir / "config.yaml")
        user_file = tmp_path / "mine.yaml"
    before = digest(user_file)
    res = invoke(["train", "--config", cfg, "--work-dir", run_dir])
    assert_one_line(res, "--work-dir: writing in", "would overwrite the input")
    assert digest(user_file) == before
    assert sorted(os.listdir(run_dir)) == ["config.yaml"]  # nothing else was made: no lock, no log


def test_pretrained_weights_where_the_run_writes_its_checkpoints(tmp_path):
    save_dir = tmp_path / "checkpoints"
    before = seed_checkpoint(save_dir)  # ckpt_e1.pth: the run's own epoch 1 would replace it
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(saver={"save_dir": "checkpoints",
                                                            "pretrain_model": str(save_dir / "ckpt_e1.pth")}))
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path])
    assert_one_line(res, "saver.save_dir: writing in", f"would overwrite the input {save_dir / 'ckpt_e1.pth'}")
    assert fingerprint(save_dir) == before


def test_read_only_results_dir_fails_at_start(tmp_path, trained_run):  # noqa: F811
    with read_only(tmp_path / "ro") as ro:
        cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(saver={"save_dir": "checkpoints",
                                                                "results_dir": str(ro / "results")}))
        res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
        assert_one_line(res, f"saver.results_dir: cannot write in {ro}: ")
        assert not (tmp_path / "run" / "checkpoints").exists()  # refused before the run, not after it
        work, _ = trained_run
        res = invoke(["eval", "--config", cfg, "--checkpoint", work / "checkpoints" / "ckpt_e1.pth"])
        assert_one_line(res, f"saver.results_dir: cannot write in {ro}: ")


def test_newline_in_work_dir_keeps_config_yaml_loadable(tmp_path, monkeypatch):
    run_dir = tmp_path / "a\nb"
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    args = ["train", "--config", cfg, "--work-dir", str(run_dir)]
    monkeypatch.setattr("sys.argv", ["up", *args])  # config.yaml records the command line
    res = invoke(args)
    assert res.exit_code == 0, (res.stderr, res.exception)
    text = (run_dir / "config.yaml").read_text()
    argv = [line for line in text.splitlines() if line.startswith("# argv: ")]
    assert len(argv) == 1 and "a\\nb" in argv[0]  # one comment line, the newline escaped
    again = resolve_config(str(run_dir / "config.yaml"))
    assert again["net"] == resolve_config(cfg)["net"]


# -- folders a hook writes (Hook.output_dirs): the same guard, at start-up -----------------------------
@pytest.mark.parametrize("hook, key", [("visualize", "out_dir"), ("visualize", "logdir"), ("grad_cam", "save_dir"),
                                       ("eval_insight", "logdir"), ("auto_save_metric", "metric_json")])
def test_hook_folder_under_a_file_fails_at_start(tmp_path, hook, key):
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's own file\n")
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(hooks=[{"type": hook, "kwargs": {key: "notes.txt/pictures"}}]))
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path])
    assert_one_line(res, f"hooks[0].kwargs.{key}: ", "not a directory")
    assert notes.read_text() == "the user's own file\n"
    assert not (tmp_path / "checkpoints").exists()  # refused before the run, not at its first evaluation


def test_read_only_hook_folder_fails_at_start(tmp_path):
    with read_only(tmp_path / "ro") as ro:
        hooks = [{"type": "visualize", "kwargs": {"out_dir": str(ro / "vis"), "tensorboard": False}}]
        cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(hooks=hooks))
        res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
        assert_one_line(res, f"hooks[0].kwargs.out_dir: cannot write in {ro}: ")
        assert not (tmp_path / "run" / "checkpoints").exists()


def test_hook_folder_holding_the_config_under_a_name_it_writes(tmp_path):
    vis = tmp_path / "vis"
    vis.mkdir()
    cfg = write_yaml(vis / "epoch_001.png", tiny_cfg(hooks=[{"type": "visualize", "kwargs": {"tensorboard": False}}]))
    before = digest(cfg)
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path])
    assert_one_line(res, "hooks[0].kwargs.out_dir: writing in", "would overwrite the input")
    assert digest(cfg) == before


def test_metric_json_that_is_the_config(tmp_path):
    cfg_path = tmp_path / "cfg.json"
    cfg = write_yaml(cfg_path, tiny_cfg(hooks=[{"type": "auto_save_metric", "kwargs": {"metric_json": str(cfg_path)}}]))
    before = digest(cfg)
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
    assert_one_line(res, "hooks[0].kwargs.metric_json: writing in", "would overwrite the input")
    assert digest(cfg) == before


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["train", "dry-run"])
def test_hook_kwargs_that_are_not_a_mapping_are_one_line_before_the_folders_are_read(tmp_path, dry_run):
    """The run's folders are read from every hook's kwargs (RunPaths) before the hooks are
    built: kwargs given as a number must reach the builder's one line, not a TypeError."""
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(hooks=[{"type": "visualize", "kwargs": 5}]))
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run", *dry_run])
    assert_one_line(res, "hooks[0].kwargs: expected a mapping, got int")
