"""``up benchmark``: one model in every deployment format, measured the same way.

Formats: ``eager`` (PyTorch), ``compile`` (``torch.compile`` of the model), ``torchscript``,
``pt2`` (torch.export), ``onnx`` (onnxruntime, fp32; detectors end to end), ``onnx-int8``
(onnxruntime, statically quantized on train images, :mod:`.int8`). The exported files are
written to ``--out`` by ``up export``'s own code (and verified as it verifies).

Per format: file size (eager / compile: the weights in float32), ms per image at batch 1 and
images/s at ``--batch`` (``--warmup`` runs first, then the median of ``--repeats`` timed runs,
on the first images of the val split, pre-processing included for the exported files as they
run it), and the primary metric on the whole val split by the config's evaluator. Every format
runs with the same intra-op thread count (``runtime.num_threads``, else torch's). The table is
printed and written as ``benchmark.csv`` and ``benchmark.json`` with the machine (CPU model,
cores, load average, library versions).
"""
import csv
import logging
import os
import platform
import statistics
import time

import torch

from ..atomic import opened, write_json
from ..errors import ConfigError

log = logging.getLogger("up")
FORMATS = ("eager", "compile", "torchscript", "pt2", "onnx", "onnx-int8")
DEFAULT_FORMATS = ("eager", "pt2", "onnx", "onnx-int8")
COLUMNS = ("format", "size_mb", "ms_per_image_b1", "images_per_s", "batch", "metric", "value", "note")


def parse_formats(text):
    names = list(DEFAULT_FORMATS) if text is None else [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in names if f not in FORMATS]
    if bad or not names:
        raise ConfigError("--formats", f"{', '.join(bad) or 'nothing'} not among {', '.join(FORMATS)}")
    return names


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    import onnxruntime

    return {"cpu": cpu, "cores": os.cpu_count(), "load_average": list(os.getloadavg()),
            "torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "python": platform.python_version()}


def _timed(fn, warmup, repeats):
    with torch.no_grad():
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _val_images(trainer, n):
    from ..data.model_input import batch_to_model

    images = []
    for batch in trainer.loaders.test_loader():
        batch = batch_to_model(batch, "cpu")
        images.extend(list(batch["image"]))
        if len(images) >= n:
            break
    return images[:n]


def _as_batch(images, task):
    return torch.stack(images) if task == "cls" else list(images)


def _export(cfg, checkpoint, fmt, path, form, config_files):
    from . import export_model
    from .runtime import ExportedModel

    record = export_model(cfg, checkpoint, fmt, path, form=form, config_files=config_files)
    return ExportedModel(path, record), os.path.getsize(path)


def _int8(cfg, onnx_model, trainer, calib_images, config_files):
    import copy

    from .int8 import calibration_feeds, quantize_file
    from .runtime import ExportedModel

    src = onnx_model.path
    dst = os.path.splitext(src)[0] + ".int8.onnx"
    names = onnx_model.record["input"].get("names") or ["image"]
    feeds = calibration_feeds(onnx_model, trainer, calib_images)
    method = quantize_file(src, dst, names, feeds)
    record = dict(copy.deepcopy(onnx_model.record), file=dst, quantization={"method": method})
    write_json(dst + ".json", record, indent=2)
    return ExportedModel(dst, record), os.path.getsize(dst), f"{method}, {len(feeds)} calibration images"


def run_benchmark(cfg, checkpoint, formats, out_dir, *, batch=8, warmup=3, repeats=10, calib_images=32,
                  metric=True, config_files=()):
    from ..paths import guard_output_dir
    from ..predict import load_model
    from .evaluate import evaluate_exported, evaluation_trainer
    from ..registry import EXPORTERS
    from .graphs import is_detector
    from .int8 import primary_metric

    guard_output_dir(out_dir, "--out", inputs=[checkpoint, *config_files])
    os.makedirs(out_dir, exist_ok=True)
    threads = cfg["runtime"].get("num_threads") or torch.get_num_threads()
    torch.set_num_threads(threads)
    trainer = evaluation_trainer(cfg)
    model = load_model(cfg, checkpoint, "cpu", True)
    task = "det" if is_detector(model) or isinstance(getattr(model, "kind", None), str) and model.kind in EXPORTERS else "cls"
    images = _val_images(trainer, batch)
    if not images:
        raise ConfigError("dataset.test", "the val split gave no images to time")
    batch = len(images)
    weights_mb = sum(p.numel() * 4 for p in model.state_dict().values() if p.is_floating_point()) / 1e6
    rows, onnx_model = [], None
    from ..quant import is_quantized

    qat = is_quantized(model)  # a fake-quant net: its onnx row is the int8 QDQ file already
    for fmt in formats:
        note, size_mb = "", weights_mb
        if qat and fmt == "onnx-int8":
            rows.append({"format": fmt, "note": "not run: the net is quantization-aware trained, its onnx row is "
                                                "the int8 QDQ file"})
            continue
        try:
            if fmt == "eager":
                runner = model
                note = "fake-quant (QAT) model" if qat else ""
            elif fmt == "compile":
                runner = torch.compile(model)
                note = "torch.compile (compile time not counted: warm-up)"
            elif fmt == "onnx-int8":
                if onnx_model is None:
                    onnx_model, _ = _export(cfg, checkpoint, "onnx", os.path.join(out_dir, "model.onnx"),
                                            "end2end" if task == "det" else "raw", config_files)
                runner, size, note = _int8(cfg, onnx_model, trainer, calib_images, config_files)
                size_mb = size / 1e6
            else:
                ext = {"onnx": ".onnx", "pt2": ".pt2", "torchscript": ".pt"}[fmt]
                form = "end2end" if task == "det" and fmt == "onnx" else "raw"
                runner, size = _export(cfg, checkpoint, fmt, os.path.join(out_dir, "model" + ext), form, config_files)
                runner.run = _threaded(runner, threads)
                if fmt == "onnx":
                    onnx_model = runner
                note = {"onnx": "end to end (NMS in the graph)" if task == "det" else "",
                        "pt2": "raw outputs + decode step" if task == "det" else ""}.get(fmt, "")
                if qat:
                    note = " ".join(filter(None, ["QAT int8 QDQ" if fmt == "onnx" else "fake-quant ops", note]))
                size_mb = size / 1e6
        except Exception as exc:  # a format that cannot hold this model is a row, not the end of the table
            if isinstance(exc, ConfigError) and "--out" in str(exc):
                raise
            rows.append({"format": fmt, "note": f"failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"})
            continue
        one = _as_batch(images[:1], task)
        many = _as_batch(images, task)
        ms = 1000 * _timed(lambda: runner({"image": one}), warmup, repeats)
        per_s = batch / _timed(lambda: runner({"image": many}), warmup, repeats)
        row = {"format": fmt, "size_mb": round(size_mb, 3), "ms_per_image_b1": round(ms, 3),
               "images_per_s": round(per_s, 1), "batch": batch, "note": note}
        if metric:
            metrics, _ = evaluate_exported(cfg, runner, trainer)
            key = primary_metric(trainer, metrics)
            row.update(metric=key, value=None if key is None else round(float(metrics[key]), 4))
        log.info("benchmark %s: %s", fmt, row)
        rows.append(row)
    info = {"machine": machine(), "threads": threads, "warmup": warmup, "repeats": repeats, "batch": batch,
            "config": cfg.get("origin", {}).get("file") if isinstance(cfg.get("origin"), dict) else None,
            "checkpoint": checkpoint, "rows": rows}
    write_json(os.path.join(out_dir, "benchmark.json"), info, indent=2)
    with opened(os.path.join(out_dir, "benchmark.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in COLUMNS})
    return info


def _threaded(model, threads):
    """The exported file's runner rebuilt with ``threads`` intra-op threads (onnxruntime)."""
    from .runtime import file_runner

    return file_runner(model.path, model.format, threads=threads)


def format_table(info):
    m = info["machine"]
    head = (f"machine: {m['cpu']}, {m['cores']} cores, load average {m['load_average'][0]:.2f}; "
            f"{info['threads']} thread(s); torch {m['torch']}, onnxruntime {m['onnxruntime']}; "
            f"median of {info['repeats']} after {info['warmup']} warm-up runs")
    lines = [head, f"{'format':<12}{'size MB':>9}{'ms/img b1':>11}{'img/s b' + str(info['batch']):>11}"
                   f"{'metric':>16}  note"]
    for r in info["rows"]:
        value = "" if r.get("value") is None else f"{r.get('metric')} {r['value']:.4f}"
        if "size_mb" not in r:
            lines.append(f"{r['format']:<12}{'':>9}{'':>11}{'':>11}{'':>16}  {r['note']}")
            continue
        lines.append(f"{r['format']:<12}{r['size_mb']:>9.2f}{r['ms_per_image_b1']:>11.2f}{r['images_per_s']:>11.1f}"
                     f"{value:>16}  {r.get('note', '')}")
    return "\n".join(lines)
