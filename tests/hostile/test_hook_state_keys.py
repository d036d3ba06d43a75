"""Two hooks of one type, reordered in the YAML between a run and its resume: each hook gets
its own saved state back (keyed by its ``name:``), or the run is refused in one line before
anything is built; never the other hook's state by list position."""
import pytest
import torch

from conftest import invoke
from hostile_helpers import assert_one_line, fingerprint, tiny_cfg, write_yaml

# top1 and top5 of an untrained 10-class model differ, so each hook's best value names it;
# min_delta 1000: no later evaluation improves, so the first value stays each hook's best.
BY_TOP1 = {"type": "early_stopping", "name": "stop_on_top1",
           "kwargs": {"monitor": "top1", "patience": 10, "min_delta": 1000.0}}
BY_TOP5 = {"type": "early_stopping", "name": "stop_on_top5",
           "kwargs": {"monitor": "top5", "patience": 10, "min_delta": 1000.0}}


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def test_reordered_hooks_of_one_type_resume_with_their_own_state(tmp_path):
    work = tmp_path / "run"
    cfg = tiny_cfg(hooks=[BY_TOP1, BY_TOP5], trainer={"max_epoch": 2})
    res = invoke(["train", "--config", write_yaml(tmp_path / "a.yaml", cfg), "--work-dir", work])
    assert res.exit_code == 0, (res.stderr, res.exception)
    saved = load(work / "checkpoints" / "ckpt_e2.pth")["hooks"]
    top1, top5 = saved["stop_on_top1"]["best"], saved["stop_on_top5"]["best"]
    assert top1 != top5  # else a swap could not be seen

    cfg = tiny_cfg(hooks=[BY_TOP5, BY_TOP1], trainer={"max_epoch": 3})  # the list reordered
    res = invoke(["train", "--config", write_yaml(tmp_path / "b.yaml", cfg), "--work-dir", work,
                  "--resume", work / "checkpoints" / "ckpt_e2.pth"])
    assert res.exit_code == 0, (res.stderr, res.exception)
    resumed = load(work / "checkpoints" / "ckpt_e3.pth")["hooks"]
    assert resumed["stop_on_top1"]["best"] == top1 and resumed["stop_on_top5"]["best"] == top5
    assert resumed["stop_on_top1"]["wait"] == saved["stop_on_top1"]["wait"] + 1
    assert resumed["stop_on_top5"]["wait"] == saved["stop_on_top5"]["wait"] + 1


def test_two_unnamed_hooks_of_one_type_with_state_are_refused(tmp_path):
    unnamed = [{k: v for k, v in h.items() if k != "name"} for h in (BY_TOP1, BY_TOP5)]
    save_dir = tmp_path / "run" / "checkpoints"
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(hooks=unnamed))
    res = invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run"])
    assert_one_line(res, "hooks[1]: early_stopping is also listed at hooks[0]", "add `name: <word>` to each")
    assert fingerprint(save_dir) == {}


@pytest.mark.parametrize("second, fragment", [
    ({**BY_TOP5, "name": "stop_on_top1"}, "hooks[1].name: 'stop_on_top1' is already the state key of hooks[0]"),
    ({**BY_TOP5, "name": "early stopping"}, "hooks[1].name: expected a word of letters, digits, _ or -"),
    ({**BY_TOP5, "name": ["x"]}, "hooks[1].name: expected a word"),
])
def test_bad_hook_names_are_refused(tmp_path, second, fragment):
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg(hooks=[BY_TOP1, second]))
    assert_one_line(invoke(["train", "--config", cfg, "--work-dir", tmp_path / "run"]), fragment)


def legacy_checkpoint(work, tmp_path, keys):
    """A finished run whose checkpoint keeps its early_stopping states under ``keys`` (as files
    written before hooks had names keyed repeats by position: early_stopping, early_stopping_2)."""
    cfg = tiny_cfg(hooks=[BY_TOP1, BY_TOP5][:len(keys)], trainer={"max_epoch": 1})
    res = invoke(["train", "--config", write_yaml(tmp_path / "old.yaml", cfg), "--work-dir", work])
    assert res.exit_code == 0, (res.stderr, res.exception)
    path = work / "checkpoints" / "ckpt_e1.pth"
    ckpt = load(path)
    states = [ckpt["hooks"].pop(h["name"]) for h in (BY_TOP1, BY_TOP5)[:len(keys)]]
    ckpt["hooks"].update(zip(keys, states))
    torch.save(ckpt, path)
    return path, states


def test_a_position_keyed_state_loads_when_only_one_hook_can_own_it(tmp_path):
    work = tmp_path / "run"
    path, (state,) = legacy_checkpoint(work, tmp_path, ["early_stopping"])
    cfg = tiny_cfg(hooks=[BY_TOP1], trainer={"max_epoch": 2})
    res = invoke(["train", "--config", write_yaml(tmp_path / "new.yaml", cfg), "--work-dir", work, "--resume", path])
    assert res.exit_code == 0, (res.stderr, res.exception)
    resumed = load(work / "checkpoints" / "ckpt_e2.pth")["hooks"]["stop_on_top1"]
    assert resumed["best"] == state["best"] and resumed["wait"] == state["wait"] + 1


def test_position_keyed_states_of_two_hooks_are_refused_not_guessed(tmp_path):
    work = tmp_path / "run"
    path, _ = legacy_checkpoint(work, tmp_path, ["early_stopping", "early_stopping_2"])
    before = fingerprint(work / "checkpoints")
    cfg = tiny_cfg(hooks=[BY_TOP5, BY_TOP1], trainer={"max_epoch": 2})
    res = invoke(["train", "--config", write_yaml(tmp_path / "new.yaml", cfg), "--work-dir", work, "--resume", path])
    assert_one_line(res, "keeps 2 early_stopping states by list position (early_stopping, early_stopping_2)",
                    "`name: early_stopping`")
    assert fingerprint(work / "checkpoints") == before


def test_a_named_hook_is_still_found_by_its_type_and_a_null_name_is_no_name():
    from up_trainer.engine.builder import build_hooks

    hooks = build_hooks([{"type": "train_val_logger", "name": "main_log", "kwargs": {"summary_writer": "none"}},
                         {"type": "early_stopping", "name": None}])
    assert hooks.get("train_val_logger") is hooks.get("main_log") is not None  # send_images looks it up by type
    assert [h.name for h in hooks if h.type_name == "early_stopping"] == ["early_stopping"]


def test_one_position_keyed_state_that_two_named_hooks_could_take_is_refused(tmp_path):
    work = tmp_path / "run"
    path, _ = legacy_checkpoint(work, tmp_path, ["early_stopping"])
    cfg = tiny_cfg(hooks=[BY_TOP5, BY_TOP1], trainer={"max_epoch": 2})
    res = invoke(["train", "--config", write_yaml(tmp_path / "new.yaml", cfg), "--work-dir", work, "--resume", path])
    assert_one_line(res, "keeps one early_stopping state (early_stopping) and 2 of this run's early_stopping hooks",
                    "`name: early_stopping`")
