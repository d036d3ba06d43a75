"""``quant.mode: ptq`` as ``up train`` runs it (UP's quant_ptq runner): the float weights loaded
from ``saver.pretrain_model`` (or ``resume_model``), activation ranges observed on
``calibration_batches`` train batches with quantization off, weight ranges from the weights, the
round-to-nearest net evaluated, the rounding reconstructed unit by unit (reconstruct.py), the
result evaluated and written as ``ckpt_ptq.pth`` (and ckpt_latest.pth). No optimizer step is taken.
"""
import copy
import logging
import time

import torch

from ..data.model_input import batch_to_model
from ..errors import ConfigError
from .fake_quant import FakeQuantizer
from .reconstruct import capture, is_quant_layer, reconstruct_unit, reconstruction_units

log = logging.getLogger("up")

PTQ_CHECKPOINT = "ckpt_ptq.pth"


class _ObserveOnly(FakeQuantizer):
    """Calibration: the range is observed, the tensor passed on unquantized (MQBench's
    calibration without quantization, so later ranges see float inputs)."""

    def forward(self, x):
        self._observe(x.float())
        return x


class _Passthrough(FakeQuantizer):
    """The float reference net's quantizers: nothing observed, nothing rounded."""

    def forward(self, x):
        return x


def _swap(model, cls):
    """Set every FakeQuantizer of ``model`` to ``cls`` (None: back to FakeQuantizer)."""
    for m in model.modules():
        if isinstance(m, FakeQuantizer):
            m.__class__ = cls or FakeQuantizer


def calibration_batches(trainer, count):
    batches, loader = [], iter(trainer.loaders.train_loader(1))
    for _ in range(count):
        try:
            batches.append(batch_to_model(next(loader), trainer.device, trainer.memory_format))
        except StopIteration:
            break
    del loader
    return batches


def _run(model, batch):
    model(batch)


@torch.no_grad()
def calibrate(model, batches):
    """Observe every activation's range on ``batches`` (quantization off), then each weight's."""
    model.eval()
    activations = [m for m in model.modules() if isinstance(m, FakeQuantizer) and not m.is_weight]
    for q in activations:
        q.__class__ = _ObserveOnly
    try:
        for batch in batches:
            model(batch)
    finally:
        for q in activations:
            q.__class__ = FakeQuantizer
    for layer in model.modules():
        if is_quant_layer(layer):
            layer.weight_quant._observe(layer.weight.detach())


def post_training_quantize(model, batches, ptq, iterations=None, seed=0, calibrated=None, max_units=None):
    """Calibrate ``model`` (a fake-quant net with float weights) and reconstruct its rounding per
    ``ptq`` (the checked quant.ptq); returns [(unit, error before, error after)]. ``calibrated``
    is called between the two (the round-to-nearest net's evaluation); ``max_units`` reconstructs
    only the first units (a dry run)."""
    iterations = ptq["iterations"] if iterations is None else iterations
    calibrate(model, batches)
    if calibrated is not None:
        calibrated()
    float_model = copy.deepcopy(model)
    _swap(float_model, _Passthrough)
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    report = []
    units = reconstruction_units(model, ptq["algorithm"])
    log.info("ptq: %s on %d calibration batch(es), %d unit(s) of %d iteration(s) each", ptq["algorithm"],
             len(batches), len(units), iterations)
    if max_units is not None and max_units < len(units):
        log.info("ptq: the first %d of the %d units reconstructed (%s), the rest left at round-to-nearest",
                 max_units, len(units), ", ".join(units[:max_units]))
        units = units[:max_units]
    for path in units:
        start = time.perf_counter()
        quant_calls = capture(model, path, batches, _run)
        float_calls = capture(float_model, path, batches, _run)
        if not quant_calls:
            log.info("ptq: %s is not called in evaluation; left at round-to-nearest", path)
            continue
        with torch.enable_grad():
            before, after = reconstruct_unit(model.get_submodule(path), quant_calls, float_calls, ptq, iterations,
                                             generator)
        report.append((path, before, after))
        log.info("ptq: %s output error %.4g -> %.4g (round-to-nearest -> learned rounding)  %.1fs", path, before,
                 after, time.perf_counter() - start)
    return report


@torch.no_grad()
def _sync_ema(trainer):
    """An EMA's weights become the quantized net's: evaluation and up eval read them first."""
    if trainer.ema is not None:
        for key, value in trainer.module.state_dict().items():
            trainer.ema.model[key].copy_(value)


def run_ptq(trainer, iterations=None, batch_count=None, evaluate=True, save=True, max_units=None):
    """What ``up train`` does in mode: ptq (``up train --dry-run`` passes fewer iterations and
    batches, and neither evaluates nor saves)."""
    ptq = trainer.cfg["quant"]["ptq"]
    if trainer.dist.enabled:  # each process would round its own way on its own batches
        raise ConfigError("quant.mode", "ptq runs in one process (calibration and reconstruction are not "
                          "distributed)", "run it without --launch / --ng")
    batches = calibration_batches(trainer, ptq["calibration_batches"] if batch_count is None else batch_count)
    model = trainer.module
    can_evaluate = evaluate and trainer.loaders.test_set is not None and trainer.evaluator is not None

    def round_to_nearest():
        _sync_ema(trainer)
        if can_evaluate:
            log.info("ptq: metrics after calibration (round-to-nearest weights): %s", trainer.evaluate())

    report = post_training_quantize(model, batches, ptq, iterations, seed=trainer.cfg["runtime"]["seed"],
                                    calibrated=round_to_nearest, max_units=max_units)
    if report:
        before = sum(r[1] for r in report) / len(report)
        after = sum(r[2] for r in report) / len(report)
        log.info("ptq: mean unit output error %.4g -> %.4g over %d unit(s)", before, after, len(report))
    metrics = {}
    _sync_ema(trainer)
    if can_evaluate:
        metrics = trainer.evaluate()
        log.info("ptq: metrics after reconstruction: %s", metrics)
    if save:
        trainer.save_checkpoint([PTQ_CHECKPOINT])
        trainer.store.flush()
    return metrics
