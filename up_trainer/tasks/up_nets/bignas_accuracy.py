"""UP's BigNAS evaluation phases under ``up eval``: ``sample_accuracy`` (every sampled subnet of
a supernet evaluated) and ``calib_bn`` (BatchNorm statistics re-estimated before a subnet is
evaluated, UP's evaluate_subnet).

BatchNorm re-estimation, as UP's controller does it: a supernet's running statistics were
gathered over many different subnets, so before a subnet is evaluated its norms get the
statistics of its own features. Every calibration batch runs through the net with each
BatchNorm in batch-statistics mode (the rest of the net in eval mode, no gradients); the
statistics each norm saw are averaged over the batches weighted by their image count, then
written over its running mean and variance. The calibration batches are the train split's
(UP reads a separate ``train_calib`` split, a subset of its train images with the test
transforms). One difference: the variance averaged is torch's unbiased batch variance, where UP
averages the biased one (a factor (n - 1) / n, n the values per channel: nil for real images).

sample_accuracy: the subnets ``up flops`` lists (drawn from a generator seeded with 0, kept
within ``flops_range``, at the first test image's size) are each activated, re-estimated and
evaluated; the log lists every subnet with its multiply-adds, metrics and settings, then the top
ones by ``bignas.data.metric1`` (those within 1 % above ``baseline_flops`` or below it, when
given) and the Pareto front (no other subnet both as good and cheaper); ``sampled_subnets.json``
in the results folder holds the list. The supernet's own statistics are put back afterwards.
"""
import json
import logging
import os

import torch
from torch import nn

from ...errors import ConfigError
from ..det.atss import RetinaPlusModel

log = logging.getLogger("up")
TOP = 10  # UP lists its ten best


def _norms(model):
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


@torch.no_grad()
def calibrate_norms(model, batches, to_model):
    """Re-estimate every BatchNorm's running statistics of ``model`` over ``batches`` (an
    iterable of loader batches; ``to_model`` moves one to the model's device). Returns the
    number of images seen."""
    norms = _norms(model)
    saved = [m.momentum for m in norms]
    was_training = model.training
    sums = [None] * len(norms)
    seen = 0
    model.eval()
    try:
        for m in norms:  # momentum 1: after a batch, the running statistics are that batch's
            m.momentum = 1.0
            m.train()
        for batch in batches:
            batch = to_model(batch)
            n = len(batch["image"])  # a tensor's first dimension, or a detection batch's image list
            model({k: v for k, v in batch.items() if k != "target"})  # eval forward: detections only
            for i, m in enumerate(norms):
                stats = (m.running_mean.detach().clone() * n, m.running_var.detach().clone() * n)
                sums[i] = stats if sums[i] is None else (sums[i][0] + stats[0], sums[i][1] + stats[1])
            seen += n
    finally:
        for m, momentum in zip(norms, saved):
            m.momentum = momentum
        model.train(was_training)
    if not seen:
        raise ConfigError("dataset.train", "BatchNorm re-estimation (bignas.subnet.calib_bn) found no images")
    for m, (mean, var) in zip(norms, sums):
        m.running_mean.copy_(mean / seen)
        m.running_var.copy_(var / seen)
    return seen


def _calibration_batches(trainer):
    if trainer.loaders.train_set is None:
        raise ConfigError("dataset.train", "bignas.subnet.calib_bn re-estimates BatchNorm on the train split; "
                          "the config has none", "give dataset.train, or set calib_bn: false")
    return trainer.loaders.train_loader(0)


def calibrated_evaluate(trainer, model):
    """UP's evaluate_subnet with calib_bn: re-estimate, then evaluate."""
    from ...data.model_input import batch_to_model

    seen = calibrate_norms(model, _calibration_batches(trainer),
                           lambda b: batch_to_model(b, trainer.device, trainer.memory_format))
    log.info("calib_bn: BatchNorm statistics re-estimated on %d train images", seen)
    return trainer.evaluate()


def _pareto(rows, metric):
    """Rows no other row beats: at least as good for fewer multiply-adds, or better for as many."""
    return [r for r in rows if not any((o[metric] > r[metric] and o["macs"] <= r["macs"]) or
                                       (o[metric] >= r[metric] and o["macs"] < r["macs"]) for o in rows)]


def sample_accuracy(trainer, model, options):
    """UP's sample_accuracy phase on supernet ``model``; returns the last subnet's metrics."""
    from ...data.model_input import batch_to_model
    from ...config.bignas_space import parse_flops
    from .bignas_flops import draw_subnets, human

    sample = trainer.loaders.test_set[0]
    size = tuple(sample["image"].shape)
    count, span = model.sampling
    subnets, tries = draw_subnets(model, size, count, span)
    log.info("sample_accuracy: %d subnets of %d drawn (multiply-adds at 1x%s)", len(subnets), tries,
             "x".join(map(str, size)))
    if not subnets:
        raise ConfigError("bignas.subnet.flops_range", f"none of the {tries} subnets drawn has its multiply-adds "
                          f"within {human(span[0])}..{human(span[1])} at 1x{'x'.join(map(str, size))}",
                          "widen flops_range (up flops lists the supernet's range)")
    names = options.get("metrics") or [trainer.evaluator.primary_metric]
    metric = names[0]
    saved = {k: v.clone() for k, v in model.state_dict().items() if "running_" in k or "num_batches" in k}
    to_model = lambda b: batch_to_model(b, trainer.device, trainer.memory_format)  # noqa: E731
    rows, metrics = [], {}
    try:
        model.hold_subnet = True
        for i, (macs, settings) in enumerate(subnets):
            model.activate(settings)
            calibrate_norms(model, _calibration_batches(trainer), to_model)
            metrics = trainer.evaluate()
            if metric not in metrics:  # known after the first evaluation: stop before the others run
                raise ConfigError("bignas.data.metric1", f"{metric!r} is not a metric of the evaluator",
                                  f"its metrics: {', '.join(sorted(metrics))}")
            rows.append({"macs": macs, **{k: metrics.get(k) for k in metrics}, "subnet_settings": settings})
            log.info("sampled subnet %d/%d: %s multiply-adds, %s  %s", i + 1, len(subnets), human(macs),
                     json.dumps({k: metrics[k] for k in sorted(metrics)}), json.dumps(settings))
    finally:
        model.hold_subnet = False
        model.load_state_dict({**model.state_dict(), **saved})
    ranked = sorted(rows, key=lambda r: -r[metric])
    baseline = options.get("baseline_flops")
    if baseline is not None:
        limit = parse_flops(baseline, "bignas.subnet.baseline_flops")
        ranked = [r for r in ranked if r["macs"] < limit * 1.01]  # UP: less than 1 % above the baseline
    shown = names + ["macs"]
    log.info("top %d by %s%s:\n%s", min(TOP, len(ranked)), metric, "" if baseline is None else
             f" (at most 1 % above baseline_flops {baseline})",
             "\n".join(json.dumps({k: r[k] for k in shown if k in r} | {"subnet_settings": r["subnet_settings"]})
                       for r in ranked[:TOP]))
    front = sorted(_pareto(rows, metric), key=lambda r: r["macs"])
    log.info("Pareto front (%s against multiply-adds):\n%s", metric,
             "\n".join(json.dumps({k: r[k] for k in shown if k in r} | {"subnet_settings": r["subnet_settings"]})
                       for r in front))
    if trainer.dist.is_main and trainer.cfg["saver"]["save_result"]:
        from ...writers.run_files import write_text

        os.makedirs(trainer.results_dir, exist_ok=True)
        write_text(os.path.join(trainer.results_dir, "sampled_subnets.json"),
                   json.dumps({"metric": metric, "subnets": rows, "top": ranked[:TOP], "pareto": front}, indent=2))
    return metrics


class CalibratedSubnet(RetinaPlusModel):
    """A fixed subnet whose file sets ``bignas.subnet.calib_bn``: up eval re-estimates its
    BatchNorm statistics before evaluating (UP's evaluate_subnet)."""

    def evaluate_in(self, trainer):
        return calibrated_evaluate(trainer, self)
