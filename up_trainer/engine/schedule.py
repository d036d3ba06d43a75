"""When to evaluate, as a pure function of the 1-based epoch and the trainer section.

At the end of epoch e: evaluate if e == max_epoch or (e >= test_start and e % test_freq == 0).
When to save is checkpoint policy: :mod:`up_trainer.engine.checkpoint_policy`.
"""
from .checkpoint_policy import should_save, should_save_cur  # noqa: F401  (importable from here before)


def should_eval(epoch, t):
    return epoch == t["max_epoch"] or (epoch >= t["test_start"] and epoch % t["test_freq"] == 0)
