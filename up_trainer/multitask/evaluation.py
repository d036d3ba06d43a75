"""Evaluation of a multitask run: each evaluated task on its own data, with its own evaluator,
the net set to that task.

Metrics follow UP's multitask runner: every metric ``k`` of task ``t`` as ``all.{t}.{k}``, and
the task's key metric (its evaluator's primary) once more as ``key.{t}.{k}``; the run's primary
metric is the first evaluated task's key metric (what auto_save_best keeps ckpt_best.pth by),
while auto_save_best_multitask keeps ``ckpt_best.{t}.pth`` per task by each ``key.{t}``. The
per-sample results of task ``t`` go to ``results_dir/{t}/`` (UP writes them there too).
"""
import json
import logging
import os

import torch

from ..atomic import write_text

log = logging.getLogger("up")


class TaskEvaluation:
    """(task, its evaluation LoaderFactory, its evaluator); ``loaders`` None: dataset.test's."""

    def __init__(self, task, loaders, evaluator):
        self.task, self.loaders, self.evaluator = task, loaders, evaluator


class MultiTaskEvaluator:
    def __init__(self, evaluations):
        self.evaluations = evaluations
        first = evaluations[0]
        self.primary_metric = f"key.{first.task.name}.{first.evaluator.primary_metric}"

    def metric_keys(self):
        keys = []
        for ev in self.evaluations:
            keys += [f"all.{ev.task.name}.{k}" for k in ev.evaluator.metric_keys()]
            keys.append(f"key.{ev.task.name}.{ev.evaluator.primary_metric}")
        return keys

    @torch.no_grad()
    def evaluate_tasks(self, trainer, main_loaders, max_batches=None):
        """(metrics, {task: results}) of every evaluated task; the net is left on task 0."""
        metrics, results = {}, {}
        model = trainer.module
        for ev in self.evaluations:
            model.set_task(ev.task.index)
            loader = (ev.loaders or main_loaders).test_loader()
            task_metrics, task_results = trainer.evaluate_on(loader, ev.evaluator, max_batches)
            results[ev.task.name] = task_results
            for key, value in task_metrics.items():
                metrics[f"all.{ev.task.name}.{key}"] = value
            key = ev.evaluator.primary_metric
            if key in task_metrics:
                metrics[f"key.{ev.task.name}.{key}"] = task_metrics[key]
            log.info("task %s: %s", ev.task.name, ", ".join(
                f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in task_metrics.items()
                if not str(k).startswith("bbox.AP.")))
        model.set_task(0)
        return metrics, results

    def write_results(self, results, path):
        """Each task's results under ``{dir}/{task}/`` (its evaluator's files); ``path`` lists them."""
        base = os.path.dirname(path) or "."
        lines = []
        for ev in self.evaluations:
            if ev.task.name not in (results or {}):
                continue
            task_path = os.path.join(base, ev.task.name, "results.jsonl")
            os.makedirs(os.path.dirname(task_path), exist_ok=True)
            ev.evaluator.write_results(results[ev.task.name], task_path)
            lines.append(json.dumps({"task": ev.task.name, "results": os.path.join(ev.task.name, "results.jsonl")}))
        write_text(path, "".join(line + "\n" for line in lines))
