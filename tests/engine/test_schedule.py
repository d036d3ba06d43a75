"""Schedule rules as tables of cases (DESIGN.md section 2)."""
import pytest

from up_trainer.engine.schedule import should_eval, should_save, should_save_cur


def T(**kw):
    base = dict(max_epoch=10, test_freq=1, test_start=1, save_freq=1, save_start=1, save_cur_start=-1,
                save_cur_freq=1, only_save_latest=False, save_latest_freq=1)
    base.update(kw)
    return base


def epochs(fn, t):
    return [e for e in range(1, t["max_epoch"] + 1) if fn(e, t)]


@pytest.mark.parametrize("t,expected", [
    (T(), list(range(1, 11))),
    (T(test_freq=3), [3, 6, 9, 10]),
    (T(test_freq=3, test_start=7), [9, 10]),
    (T(test_freq=4, test_start=2), [4, 8, 10]),
    (T(test_freq=19, max_epoch=19), [19]),
    (T(test_freq=100), [10]),
    (T(max_epoch=1), [1]),
])
def test_should_eval(t, expected):
    assert epochs(should_eval, t) == expected


@pytest.mark.parametrize("t,expected", [
    (T(), list(range(1, 11))),
    (T(save_freq=2), [2, 4, 6, 8, 10]),
    (T(save_freq=3), [3, 6, 9, 10]),
    (T(save_freq=2, save_start=5), [6, 8, 10]),
    (T(save_freq=50), [10]),
    (T(only_save_latest=True), []),
])
def test_should_save(t, expected):
    assert epochs(should_save, t) == expected


@pytest.mark.parametrize("t,expected", [
    (T(), []),
    (T(save_cur_start=0), []),
    (T(save_cur_start=1), list(range(1, 11))),
    (T(save_cur_start=3, save_cur_freq=2), [4, 6, 8, 10]),
    (T(save_cur_start=5, save_cur_freq=3), [6, 9]),
    (T(only_save_latest=True, save_latest_freq=4), [4, 8, 10]),
    (T(only_save_latest=True), list(range(1, 11))),
])
def test_should_save_cur(t, expected):
    assert epochs(should_save_cur, t) == expected


# -- the run's Schedule object: one unit, one final position, frequencies in that unit ---------
from up_trainer.engine.schedule import Schedule  # noqa: E402


def due_positions(schedule, fn):
    return [p for p in range(1, schedule.final + 1) if fn(p)]


def test_schedule_in_epochs_matches_the_section_rules():
    t = T(test_freq=3, save_freq=2, save_start=5, save_cur_start=3, save_cur_freq=2)
    s = Schedule(t, epoch_len=7)
    assert (s.unit, s.final, s.max_epoch, s.iterations) == ("epoch", 10, 10, 70)
    assert due_positions(s, s.eval_due) == epochs(should_eval, t) == [3, 6, 9, 10]
    assert due_positions(s, s.save_due) == epochs(should_save, t) == [6, 8, 10]
    assert due_positions(s, s.latest_due) == epochs(should_save_cur, t) == [4, 6, 8, 10]


def test_schedule_under_iter_base_counts_iterations_and_keeps_max_epoch_an_epoch():
    s = Schedule(dict(T(test_freq=4, save_freq=6), max_epoch=None, max_iter=10), epoch_len=4, iter_base=True)
    # the final position is the last iteration; max_epoch stays the last epoch (3, stopping after 2 batches)
    assert (s.unit, s.final, s.max_epoch, s.iterations) == ("iter", 10, 3, 10)
    assert due_positions(s, s.eval_due) == [4, 8, 10]
    assert due_positions(s, s.save_due) == [6, 10]
    assert s.position(type("St", (), {"iter": 7, "epoch": 2})()) == 7
    assert s.lr_span(updates_per_epoch=2) == (1, 5.0)  # the LR schedule's "epochs" are updates


def test_set_frequencies_changes_what_is_due_from_then_on():
    s = Schedule(T(test_freq=5, save_freq=5), epoch_len=1)
    s.set_frequencies(test_freq=2)
    assert due_positions(s, s.eval_due) == [2, 4, 6, 8, 10] and due_positions(s, s.save_due) == [5, 10]
    s.set_frequencies(save_freq=3)
    assert due_positions(s, s.save_due) == [3, 6, 9, 10]
    assert not Schedule(T(is_eval=False), epoch_len=1).eval_due(10)


def test_the_run_length_is_sized_in_one_place():
    """Optim, trainer and loaders read the builder's Schedule; none sizes the run again."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2] / "up_trainer"
    sizing = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if re.search(r"\bRunLength\(", p.read_text()))
    assert sizing == ["engine/schedule.py"]
    built = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                   if re.search(r"\bSchedule(\.of_run)?\(", p.read_text()) and p.name != "schedule.py")
    assert built == ["engine/builder.py", "engine/preflight.py"]  # the run's, and preflight's dry check
