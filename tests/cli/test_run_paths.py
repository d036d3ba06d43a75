"""RunPaths: the folders a run writes, resolved once; the output guard and the locks read the
same object, so they cannot disagree about a folder."""
import os

from conftest import tiny_cfg
from optim_helpers import resolved
from up_trainer.run_paths import RunPaths


def config(**saver):
    cfg = tiny_cfg()
    cfg["saver"] = {"save_dir": "ckpts", "results_dir": "/abs/results", **saver}
    cfg["hooks"] = [{"type": "visualize", "kwargs": {"out_dir": "vis", "tensorboard": False}},
                    {"type": "train_val_logger", "kwargs": {"logdir": "tb"}}]
    cfg["default_hooks"] = {"insight": None}
    return resolved(cfg)


def test_saver_paths_resolve_against_the_work_dir_and_hook_folders_against_the_run_dir(tmp_path):
    paths = RunPaths.of(config(), str(tmp_path))
    assert paths.save_dir == os.path.join(tmp_path, "ckpts") and paths.results_dir == "/abs/results"
    keys = {d.key.split(".")[-1]: d for d in paths.hook_dirs}
    assert keys["out_dir"].path == os.path.join(tmp_path, "vis") and keys["logdir"].path == os.path.join(tmp_path, "tb")
    # locked: the run's own folders and the logger's logdir (lock_outputs), not visualize's out_dir
    assert paths.written() == [("run dir", str(tmp_path)), ("saver.save_dir", os.path.join(tmp_path, "ckpts")),
                               ("saver.results_dir", "/abs/results"), (keys["logdir"].key, keys["logdir"].path)]
    assert paths.resolve("w.pth") == os.path.join(tmp_path, "w.pth")


def test_an_evaluation_only_run_locks_no_save_dir_and_no_logdir(tmp_path):
    paths = RunPaths.of(config(), str(tmp_path), evaluate_only=True)
    assert paths.save_dir is None
    assert paths.written() == [("run dir", str(tmp_path)), ("saver.results_dir", "/abs/results")]
    assert [d.key for d in paths.hook_dirs] == ["hooks[0].kwargs.out_dir", "hooks[1].kwargs.logdir"]  # guarded


def test_no_summary_writer_no_logdir(tmp_path):
    cfg = config()
    cfg["hooks"][1]["kwargs"]["summary_writer"] = "none"
    assert [d.key for d in RunPaths.of(cfg, str(tmp_path)).hook_dirs] == ["hooks[0].kwargs.out_dir"]
