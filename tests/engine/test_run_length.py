"""UP's run length and frequency semantics on the epoch trainer: max_iter, fractional max_epoch,
runtime.iter_base (frequencies in iterations, mid-epoch saves), is_eval; exact resume inside
the short last epoch and from a mid-epoch iter_base checkpoint."""
import os

import pytest

from conftest import tiny_cfg
from test_train_e2e import assert_state_equal, load, train
from up_trainer.config.schema import validate
from up_trainer.engine.run_length import RunLength
from up_trainer.errors import ConfigError

# tiny_cfg: 96 training images, batch 16 -> 6 iterations per epoch
STEP = {"type": "StepLR", "kwargs": {"step_size": 1}}


def files(run_dir):
    return sorted(f for f in os.listdir(run_dir / "checkpoints") if not f.startswith("."))


def evals(stdout):
    return [line for line in stdout.splitlines() if "eval epoch" in line]


@pytest.mark.parametrize("trainer, total, epochs, last", [
    ({"max_epoch": 3}, 18, 3, 6),
    ({"max_iter": 14}, 14, 3, 2),
    ({"max_epoch": 1.5}, 9, 2, 3),
    ({"max_epoch": 9, "max_iter": 7}, 7, 2, 1),  # UP: max_iter wins
    ({"max_epoch": 2.0}, 12, 2, 6),
])
def test_run_length(trainer, total, epochs, last):
    length = RunLength(trainer, 6)
    assert (length.iterations, length.max_epoch) == (total, epochs)
    assert length.epoch_batches((epochs - 1) * 6, 6) == last
    assert length.epoch_batches(0, 6) == min(6, total)


def test_max_iter_stops_inside_the_last_epoch_and_resumes_exactly(tmp_path, run_up):
    cfg = tiny_cfg(trainer={"max_iter": 14, "max_epoch": None, "lr_scheduler": STEP})
    straight, res = train(run_up, tmp_path, "straight", cfg)
    assert "training for 14 iterations" in res.stdout
    assert files(straight) == ["ckpt_best.pth", "ckpt_e1.pth", "ckpt_e2.pth", "ckpt_e3.pth", "ckpt_latest.pth"]
    last = load(straight / "checkpoints" / "ckpt_e3.pth")
    assert (last["iter"], last["state"]["epoch_iter"], last["state"]["epoch_done"]) == (14, 2, True)
    assert [int(line.split("eval epoch ")[1].split()[0]) for line in evals(res.stdout)] == [1, 2, 3]
    # the lr schedule's epochs are the run's: StepLR step_size 1 epoch = 6 updates
    assert last["lr_scheduler"]["inner"]["last_epoch"] == 14
    resumed, _ = train(run_up, tmp_path, "resumed", cfg, "--resume", straight / "checkpoints" / "ckpt_e2.pth")
    again = load(resumed / "checkpoints" / "ckpt_e3.pth")
    assert_state_equal(last["model"], again["model"])
    assert_state_equal(last["optimizer"], again["optimizer"])


def test_fractional_max_epoch_trains_int_of_epochs_times_epoch_len(tmp_path, run_up):
    cfg = tiny_cfg(trainer={"max_epoch": 1.5, "is_eval": False})
    run_dir, res = train(run_up, tmp_path, "frac", cfg)
    assert load(run_dir / "checkpoints" / "ckpt_e2.pth")["iter"] == 9
    assert evals(res.stdout) == []  # is_eval: false, not even at the end


def test_iter_base_counts_iterations_and_resumes_from_a_mid_epoch_save(tmp_path, run_up):
    cfg = tiny_cfg(runtime={"seed": 3, "iter_base": True},
                   trainer={"max_iter": 14, "max_epoch": None, "test_freq": 5, "save_freq": 5,
                            "lr_scheduler": {"type": "MultiStepLR", "kwargs": {"milestones": [4]}}})
    straight, res = train(run_up, tmp_path, "straight", cfg)
    # saves at iterations 5 and 10 fall inside epochs 1 and 2; iteration 14 ends epoch 3
    assert files(straight) == ["ckpt_best.pth", "ckpt_e1-i5.pth", "ckpt_e2-i10.pth", "ckpt_e3.pth",
                               "ckpt_latest.pth"]
    assert len(evals(res.stdout)) == 3
    mid = load(straight / "checkpoints" / "ckpt_e2-i10.pth")
    assert (mid["iter"], mid["state"]["epoch_iter"], mid["state"]["epoch_done"]) == (10, 4, False)
    # under iter_base the milestone counts updates: the lr dropped after update 4
    assert mid["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.005)
    resumed, _ = train(run_up, tmp_path, "resumed", cfg, "--resume", straight / "checkpoints" / "ckpt_e2-i10.pth")
    a, b = load(straight / "checkpoints" / "ckpt_e3.pth"), load(resumed / "checkpoints" / "ckpt_e3.pth")
    assert_state_equal(a["model"], b["model"])
    assert_state_equal(a["optimizer"], b["optimizer"])
    assert a["iter"] == b["iter"] == 14


def test_iter_base_defaults_and_length_errors():
    base = tiny_cfg(runtime={"iter_base": True}, trainer={"max_iter": 100, "max_epoch": None, "test_freq": 7})
    t = validate(base)["trainer"]
    assert (t["test_freq"], t["save_freq"], t["save_latest_freq"]) == (7, 5000, 5000)
    assert validate(tiny_cfg())["trainer"]["save_freq"] == 1
    with pytest.raises(ConfigError, match="trainer.max_epoch: required key is missing.*max_iter"):
        validate(tiny_cfg(trainer={"max_epoch": None}))
    with pytest.raises(ConfigError, match="trainer.max_epoch: must be > 0"):
        validate(tiny_cfg(trainer={"max_epoch": 0.0}))
    with pytest.raises(ConfigError, match="trainer.max_iter: must be >= 1"):
        validate(tiny_cfg(trainer={"max_iter": 0}))


def test_dry_run_says_how_the_run_length_maps_onto_epochs(tmp_path, run_up):
    from conftest import write_cfg

    cfg = tiny_cfg(runtime={"seed": 3, "iter_base": True}, trainer={"max_iter": 14, "max_epoch": None})
    res = run_up(["train", "--config", write_cfg(tmp_path / "a.yaml", cfg), "--work-dir", tmp_path / "run",
                  "--dry-run"])
    assert res.exit_code == 0, (res.stderr, res.exception)
    log = (tmp_path / "run" / "train.log").read_text()
    assert ("a real run: training for 14 iterations = 2.333 epochs of 6 (the last epoch, 3, stops after 2 "
            "iterations); test/save frequencies count iterations (runtime.iter_base)") in log
