"""Hook objects passed to the Python API (``up_trainer.train(..., hooks=[...])``) keep their
state under a stable key, as the config's hooks do: their ``name`` attribute, else their class.
Two unnamed objects of one class that keep state are refused in one line before anything is
written (their keys could only be list positions, which a reordered resume would swap)."""
import os

import torch

import up_trainer
from api_helpers import fast_cfg
from test_api_inputs import raises_one_line


class Tally(up_trainer.Hook):
    """Adds ``step`` after each update and remembers which object saved the state."""

    def __init__(self, label, step, name=None):
        super().__init__()
        self.label, self.step, self.total, self.loaded_from = label, step, 0, None
        self.name = name

    def after_update(self, trainer, it):
        self.total += self.step

    def state_dict(self):
        return {"label": self.label, "total": self.total}

    def load_state_dict(self, state):
        self.loaded_from, self.total = state["label"], state["total"]


def test_two_unnamed_objects_of_one_class_with_state_are_refused(tmp_path):
    work = tmp_path / "run"
    raises_one_line(up_trainer.ConfigError, lambda: up_trainer.train(
        fast_cfg(), work_dir=work, hooks=[Tally("a", 1), Tally("b", 100)]),
        "hooks[1]: Tally is also listed at hooks[0]", "name")
    assert not os.path.exists(work)


def test_an_object_taking_a_config_hooks_key_is_refused(tmp_path):
    class early_stopping(Tally):  # noqa: N801 - the class name is the clash under test
        pass

    cfg = fast_cfg(hooks=[{"type": "early_stopping", "kwargs": {"monitor": "top1", "patience": 5}}])
    raises_one_line(up_trainer.ConfigError, lambda: up_trainer.train(
        cfg, work_dir=tmp_path / "run", hooks=[early_stopping("a", 1)]),
        "hooks[0]: 'early_stopping' is already the state key of the config's hook", "hook.name")


def test_named_objects_reordered_on_resume_get_their_own_state(tmp_path):
    work = tmp_path / "run"
    up_trainer.train(fast_cfg(trainer={"max_epoch": 1}), work_dir=work,
                     hooks=[Tally("a", 1, name="tally_a"), Tally("b", 100, name="tally_b")])
    saved = torch.load(work / "checkpoints" / "ckpt_latest.pth", map_location="cpu", weights_only=True)["hooks"]
    assert saved["tally_a"]["label"] == "a" and saved["tally_b"]["label"] == "b"
    assert not any(key.endswith("_2") for key in saved)
    a, b = Tally("a", 1, name="tally_a"), Tally("b", 100, name="tally_b")
    up_trainer.train(fast_cfg(trainer={"max_epoch": 2}), work_dir=work, hooks=[b, a],  # the list reordered
                     resume=work / "checkpoints" / "ckpt_latest.pth")
    assert (a.loaded_from, b.loaded_from) == ("a", "b")
    assert a.total > saved["tally_a"]["total"] and b.total == 100 * a.total  # each resumed its own count


class SkipsBaseInit(up_trainer.Hook):
    """A user's hook whose __init__ never calls super().__init__(): it keeps no name of its own."""

    def __init__(self):
        self.updates = 0

    def after_update(self, trainer, it):
        self.updates += 1


def test_an_object_that_skips_the_base_init_is_keyed_by_its_class(tmp_path):
    hook = SkipsBaseInit()
    up_trainer.train(fast_cfg(), work_dir=tmp_path / "run", hooks=[hook])
    assert hook.updates > 0
