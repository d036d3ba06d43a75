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
