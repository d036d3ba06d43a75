"""UP's ``task_sync_bn``: one BatchNorm whose affine weight and bias all tasks share, with
running statistics kept per task.

A multitask net sees the batches of several tasks (detection scenes, classification crops)
whose pixel statistics differ; UP keeps one (mean, var) pair per task so each task's
evaluation normalises with its own. Task 0 uses the layer's own ``running_mean`` /
``running_var`` (so single-task weights load unchanged); task k > 0 keeps
``task{k}_running_mean`` / ``task{k}_running_var``, copied from task 0's at the first forward
(UP's ``init_param``: pretrained statistics reach every task). The task a layer normalises for
is set by the multitask net before each task's forward.

On one process this is exact. Across processes UP synchronises each task's batch statistics
in groups of ``group_size``; that is not built here, and a run on several processes with this
norm is refused at start-up (multitask/__init__.py) rather than trained with per-process
statistics silently.
"""
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn


class TaskBatchNorm2d(nn.BatchNorm2d):
    def __init__(self, num_features, task_num=1, **kwargs):
        super().__init__(num_features, **kwargs)
        self.task_num = task_num
        self.task_idx = 0
        for k in range(1, task_num):
            self.register_buffer(f"task{k}_running_mean", torch.zeros(num_features))
            self.register_buffer(f"task{k}_running_var", torch.ones(num_features))
        # whether task 0's statistics were copied to the other tasks (UP: multi_task_init)
        self.register_buffer("tasks_initialized", torch.zeros((), dtype=torch.uint8))

    def set_task(self, idx):
        if not 0 <= idx < self.task_num:
            raise IndexError(f"task {idx} but this norm keeps statistics for {self.task_num} task(s)")
        self.task_idx = idx

    def _stats(self):
        if self.task_idx == 0:
            return self.running_mean, self.running_var
        return getattr(self, f"task{self.task_idx}_running_mean"), getattr(self, f"task{self.task_idx}_running_var")

    def forward(self, x):
        if self.task_num > 1 and not bool(self.tasks_initialized):
            with torch.no_grad():
                for k in range(1, self.task_num):
                    getattr(self, f"task{k}_running_mean").copy_(self.running_mean)
                    getattr(self, f"task{k}_running_var").copy_(self.running_var)
                self.tasks_initialized.fill_(1)
        mean, var = self._stats()
        return F.batch_norm(x, mean, var, self.weight, self.bias, self.training, self.momentum, self.eps)


def read_task_norm(kw):
    """The norm factory for ``normalize: {type: task_sync_bn, kwargs: {task_num, group_size}}``."""
    task_num = kw.take("task_num", 1, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    kw.take("group_size", None, types=(int, type(None)))  # the synchronisation group: one process here
    kw.ignore("var_mode", "statistics are exact")
    bn_kwargs = {}
    for key in ("eps", "momentum"):
        value = kw.take(key, None, types=(float, type(None)))
        if value is not None:
            bn_kwargs[key] = value
    kw.take("skip_multi_task_init", False, types=bool, only=False,
            why="every task starts from task 0's statistics, as UP does by default")
    kw.done()
    return partial(TaskBatchNorm2d, task_num=task_num, **bn_kwargs)
