"""The Python API runs one call at a time in a process: a second call made while one runs (in
another thread) is refused at once in one line, the first run's numbers are those it gives
alone, and the guard is free again once the first call returned or raised."""
import threading

import pytest

import up_trainer
from hostile_helpers import tiny_cfg


class Paused(up_trainer.Hook):
    """Holds the run after its first update until ``go`` is set; ``started`` says it got there."""

    def __init__(self):
        self.started, self.go = threading.Event(), threading.Event()

    def after_update(self, trainer, iteration):
        if not self.started.is_set():
            self.started.set()
            assert self.go.wait(120), "the test never let the run go on"


class Fails(up_trainer.Hook):
    def before_train(self, trainer):
        raise RuntimeError("a hook that fails")


def _val_loss(result):
    return result.metrics["val_loss"]


def test_a_second_concurrent_call_is_refused_and_the_first_run_is_untouched(tmp_path):
    alone = up_trainer.train(tiny_cfg(), work_dir=tmp_path / "alone")
    paused, out = Paused(), {}

    def first():
        try:
            out["result"] = up_trainer.train(tiny_cfg(), work_dir=tmp_path / "first", hooks=[paused])
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            out["error"] = exc

    thread = threading.Thread(target=first, name="first-run")
    thread.start()
    try:
        assert paused.started.wait(120), out
        calls = {
            "train": lambda: up_trainer.train(tiny_cfg(), work_dir=tmp_path / "second"),
            "evaluate": lambda: up_trainer.evaluate(tiny_cfg(), alone.checkpoint, work_dir=tmp_path / "ev"),
            "predict": lambda: up_trainer.predict(tiny_cfg(), alone.checkpoint, [tmp_path / "none.png"]),
            "build_trainer": lambda: up_trainer.build_trainer(tiny_cfg(), work_dir=tmp_path / "built"),
        }
        for name, call in calls.items():
            with pytest.raises(up_trainer.UserError) as caught:
                call()
            message = str(caught.value)
            assert message.startswith(f"up_trainer.{name}: up_trainer.train (thread first-run) is running in "
                                      "this process; the API runs one call at a time"), message
            assert "\n" not in message
        assert not (tmp_path / "second").exists()
    finally:
        paused.go.set()
        thread.join(300)
    assert "error" not in out, out.get("error")
    assert _val_loss(out["result"]) == _val_loss(alone)  # bit for bit: nothing drew from its RNGs
    log = (tmp_path / "first" / "train.log").read_text()
    assert str(tmp_path / "second") not in log and str(tmp_path / "ev") not in log
    # free again once the first call returned, and after a call that raised
    with pytest.raises(RuntimeError, match="a hook that fails"):
        up_trainer.train(tiny_cfg(), work_dir=tmp_path / "fails", hooks=[Fails()])
    assert up_trainer.evaluate(tiny_cfg(), alone.checkpoint, work_dir=tmp_path / "after")["val_loss"] == \
        pytest.approx(_val_loss(alone), rel=1e-6)
