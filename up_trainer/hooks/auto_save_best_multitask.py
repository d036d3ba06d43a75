"""auto_save_best_multitask (UP): one best checkpoint per task, ``ckpt_best.{task}.pth``.

A multi-task evaluator reports each task's key metric under a name starting with
``key.{task}`` (UP's convention, e.g. ``key.cls.top1``). Whenever a task's key metric beats
that task's best so far (higher is better, as in UP; NaN/Inf never count), the state at the
end of this evaluation's epoch is saved under ``ckpt_best.{task}.pth`` as well. The bests
travel in the hook's state, so a resumed run keeps comparing against them.
"""
import logging

from ..errors import ConfigError
from ..registry import HOOKS
from .auto_save_best import improves
from .base import Hook

log = logging.getLogger("up")


def best_name(task):
    return f"ckpt_best.{task}.pth"


@HOOKS.register("auto_save_best_multitask")
class AutoSaveBestMultiTask(Hook):
    """Keep ckpt_best.{task}.pth per task, from the ``key.{task}*`` metric of each evaluation.

    tasks: task names to track (default: the multitask section's evaluated tasks, else runtime.task_names).
    """

    priority = "LOW"

    def __init__(self, tasks: list = None):
        super().__init__()
        if tasks is not None and not all(isinstance(t, str) and t for t in tasks):
            raise ConfigError("tasks", f"expected a list of task names, got {tasks!r}")
        self.tasks = list(tasks) if tasks else None
        self.best = {}  # task -> [value, epoch]
        self._warned = False

    def before_train(self, trainer):
        if not self.tasks and trainer.cfg.get("multitask"):  # the evaluated tasks of the run
            self.tasks = [t["name"] for t in trainer.cfg["multitask"]["tasks"] if t.get("test") is not None]
        if not self.tasks:
            names = trainer.cfg.get("runtime", {}).get("task_names")
            self.tasks = [names] if isinstance(names, str) else list(names or [])
        if not self.tasks:
            raise ConfigError(f"hooks.{self.name}.kwargs.tasks", "no tasks to track",
                              "list them here or in runtime.task_names")

    def after_eval(self, trainer, metrics):
        found = {}
        for key, value in metrics.items():
            for task in self.tasks or ():
                if str(key).startswith(f"key.{task}"):
                    found[task] = value  # the last matching key counts, as in UP
        if not found and not self._warned:
            self._warned = True
            log.warning("auto_save_best_multitask: no 'key.<task>' metric for tasks %s (metrics: %s)",
                        ", ".join(self.tasks or ()), ", ".join(map(str, metrics)) or "none")
        epoch = trainer.state.epoch
        for task, value in found.items():
            value = float(value)
            best = self.best.get(task)
            if improves(value, None if best is None else best[0], "max"):
                self.best[task] = [value, epoch]
                trainer.checkpoints.request(best_name(task))
            if task in self.best:
                log.info("task %s: best epoch %d, best %.4f", task, self.best[task][1], self.best[task][0])

    def state_dict(self):
        return {"best": {task: list(v) for task, v in self.best.items()}}

    def load_state_dict(self, state):
        self.best = {task: list(v) for task, v in (state.get("best") or {}).items()}
