"""``up export --int8``: post-training int8 quantization of the exported ONNX file, with its
accuracy cost measured.

Static quantization (onnxruntime's ``quantize_static``, QDQ format, int8 per-channel weights,
uint8 activations, min-max calibration) reads the first ``calib_images`` images the config's
train loader yields (epoch 0's order and augmentation), through the pre-processing evaluation
uses. Where static
quantization fails on a graph, dynamic quantization (weights only, activations quantized at
run time) is the fallback; the record says which ran. The fp32 and int8 files are then both
evaluated on the val (test) split by the config's evaluator; the primary metric before and
after, and the change, are printed and written to ``<int8 file>.json``.
"""
import copy
import logging
import os
import time

import torch

from ..atomic import write_json

log = logging.getLogger("up")


class _Capture:
    """Wraps an ExportedModel's runner: records the feeds it would send to the graph."""

    def __init__(self, model):
        self.model, self.feeds = model, []

    def __call__(self, *inputs):
        self.feeds.append([x.detach().clone() for x in inputs])
        raise _Captured


class _Captured(Exception):
    pass


def calibration_feeds(model, trainer, n):
    """The graph inputs of the first ``n`` train images, one image per feed."""
    from ..data.model_input import batch_to_model

    capture = _Capture(model)
    real, model.run = model.run, capture
    loader = trainer.loaders.train_loader(0)
    count = 0
    try:
        for batch in loader:
            batch = batch_to_model(batch, "cpu")
            images = batch["image"]
            for i in range(len(images)):
                if count >= n:
                    break
                one = images[i: i + 1] if isinstance(images, torch.Tensor) else [images[i]]
                try:
                    model({"image": one})
                except _Captured:
                    count += 1
            if count >= n:
                break
    finally:
        model.run = real
    if not capture.feeds:
        from ..errors import ConfigError

        raise ConfigError("dataset.train", "--int8 calibration needs train images; the train split gave none")
    return capture.feeds


def quantize_file(src, dst, names, feeds):
    """Static quantization of ``src`` to ``dst``; dynamic where static fails. Returns the method."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            feed = next(self.it, None)
            return None if feed is None else {n: x.numpy() for n, x in zip(names, feed)}

    root = logging.getLogger()
    quiet = _DropAdvice()
    root.addFilter(quiet)  # onnxruntime logs advice about its optional pre-processing step on the root logger
    try:
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
        return "static"
    except Exception as exc:  # onnxruntime raises many types for graphs it cannot calibrate
        log.warning("int8: static quantization failed (%s); quantizing dynamically (weights only)",
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        return "dynamic"
    finally:
        root.removeFilter(quiet)


class _DropAdvice(logging.Filter):
    def filter(self, record):
        return "pre-processing before quantization" not in record.getMessage() and \
            "run pre-processing before quantization" not in record.getMessage()


def primary_metric(trainer, metrics):
    key = getattr(trainer.evaluator, "primary_metric", None)
    if key not in metrics:
        key = next((k for k in ("top1", "bbox.AP") if k in metrics), None)
    if key is None:
        key = next((k for k, v in metrics.items() if isinstance(v, (int, float))), None)
    return key


def quantize_export(cfg, record, calib_images, config_files=()):
    """Write ``<file>.int8.onnx`` (and its record) beside the fp32 file; returns the int8 summary."""
    from ..paths import guard_output_file
    from .evaluate import evaluate_exported, evaluation_trainer
    from .runtime import ExportedModel

    src = record["file"]
    dst = os.path.splitext(src)[0] + ".int8.onnx"
    for path in (dst, dst + ".json"):
        guard_output_file(path, "--out", inputs=[record["checkpoint"], *config_files])
    trainer = evaluation_trainer(cfg)
    fp32 = ExportedModel(src, record)
    names = record["input"].get("names") or [record["input"].get("name", "image")]
    feeds = calibration_feeds(fp32, trainer, calib_images)
    start = time.perf_counter()
    method = quantize_file(src, dst, names, feeds)
    seconds = time.perf_counter() - start
    int8_record = copy.deepcopy(record)
    int8_record.update(file=dst, quantization={"method": method, "calibration_images": len(feeds),
                                               "weights": "int8", "activations": "uint8" if method == "static"
                                               else "fp32 (quantized at run time)"})
    int8 = ExportedModel(dst, int8_record)
    before, _ = evaluate_exported(cfg, fp32, trainer)
    after, _ = evaluate_exported(cfg, int8, trainer)
    key = primary_metric(trainer, before)
    delta = None if key is None else after[key] - before[key]
    summary = {"file": dst, "method": method, "calibration_images": len(feeds), "metric": key,
               "fp32": before.get(key), "int8": after.get(key), "delta": delta, "seconds": round(seconds, 2),
               "size_fp32": os.path.getsize(src), "size_int8": os.path.getsize(dst)}
    summary["summary"] = (f"{dst}: int8 ({method}, {len(feeds)} calibration images), {key} on the val split "
                          f"{before.get(key):.4f} -> {after.get(key):.4f} ({delta:+.4f}); size "
                          f"{summary['size_fp32'] / 1e6:.2f} -> {summary['size_int8'] / 1e6:.2f} MB"
                          if key is not None else f"{dst}: int8 ({method}); the evaluator gave no metric")
    int8_record["int8"] = {k: v for k, v in summary.items() if k != "summary"}
    write_json(dst + ".json", int8_record, indent=2)
    log.info("%s", summary["summary"])
    return summary
