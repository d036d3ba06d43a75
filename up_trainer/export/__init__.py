"""``up export``: a trained model as ONNX, torch.export (pt2) or TorchScript, verified against
PyTorch on export.

What is exported (see :mod:`.graphs`, :mod:`.detectors`): classifiers as image batch ->
logits, scores; detectors of the dense families (RetinaNet, FCOS, SSDlite, YOLOX, the ATSS
RetinaNet, UP's FCOS) to ONNX and pt2 in a raw form (RetinaNet / FCOS: head outputs plus anchors,
:mod:`.decode`; the others: dense boxes and scores, :mod:`.select`) and to ONNX end to end
(``--form end2end``: decoding and NMS inside the graph); the two-stage nets (torchvision's
Faster R-CNN, UP's C4 / R-FCN / Cascade R-CNN) likewise, their raw form being the proposals
and the per-class boxes and scores before the last NMS (:mod:`.two_stage`); every torchvision
detector to TorchScript as the whole model with its post-processing (list of images ->
detections), or, where TorchScript cannot compile the net, as raw head outputs like ONNX. The
batch axis is dynamic everywhere; the image size is fixed at the export size, except with
``dynamic_size`` (classifiers; detectors in ONNX and pt2, their anchors and per-level counts then
computed in the graph: :mod:`.shapes`; SSDlite, which resizes to one fixed size, refuses it).
``--int8`` quantizes the ONNX file afterwards (:mod:`.int8`).

Weights: the EMA weights when the checkpoint has them (``--no-ema`` for the raw ones).
Verification: the file is loaded back (onnxruntime; ``torch.export.load``; ``torch.jit.load``)
and run on batches of sizes 1 and 3 (the export traced batch 2). Classifiers and raw heads: on
seeded random inputs, the largest error (see :mod:`.verify`) must be <= the tolerance.
Detectors: on the val set's images (:mod:`.inputs`), detections paired by the rule of
:mod:`.compare`; a difference no rule explains, or nothing compared, fails. Either way
:class:`ExportMismatch` (exit 1, one line; the file stays for inspection). ``<out>.json`` beside the model records inputs,
outputs, the weights used, the tolerance, the measured error and, for raw heads, the decode
parameters.
"""
import logging
import math
import os

import torch

from ..atomic import write_json
from ..errors import ConfigError
from ..registry import EXPORTERS
from .graphs import DENSE_KINDS, ClassifierGraph, DenseHeadsGraph, is_detector, scripted_detector
from .compare import describe, require_compared
from .inputs import val_samples
from .verify import ExportMismatch, onnx_runner, tensors_error

log = logging.getLogger("up")
FORMATS = ("onnx", "pt2", "torchscript")
FORMS = ("raw", "end2end")
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt", "pt2": ".pt2"}
DEFAULT_TOLERANCE = 1e-4
VERIFY_BATCHES = (1, 3)
TRACE_BATCH = 2


def _input_size(cfg, model, input_size):
    from ..flops import parse_input_size

    if input_size:
        return parse_input_size(input_size)
    if getattr(model, "kind", None) in ("yolox", "retina_plus", "up_fcos", "up_rcnn") and not input_size:
        from ..engine.builder import build_dataset

        entry = cfg["dataset"].get("test") or cfg["dataset"].get("train")
        if entry is None:
            raise ConfigError("--input-size", "no dataset in the config to read the input size from", "give C,H,W")
        h, w = build_dataset(entry, "dataset.test")[0]["image"].shape[-2:]
        return (3, -(-int(h) // 32) * 32, -(-int(w) // 32) * 32)  # the net pads to a multiple of 32
    if is_detector(model):
        t = model.detector.transform
        side = int(t.min_size[-1]) if isinstance(t.min_size, (list, tuple)) else int(t.min_size)
        side = -(-side // 32) * 32  # the detector pads to a multiple of 32: export that size
        return (3, side, side)
    from ..engine.builder import build_dataset

    entry = cfg["dataset"].get("test") or cfg["dataset"].get("train")
    if entry is None:
        raise ConfigError("--input-size", "no dataset in the config to read the input size from", "give C,H,W")
    return tuple(build_dataset(entry, "dataset.test")[0]["image"].shape)


def _inputs(size, batch, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand((batch, *size), generator=g)


def export_model(cfg, checkpoint, fmt, out=None, *, form="raw", input_size=None, use_ema=True,
                 tolerance=DEFAULT_TOLERANCE, opset=17, config_files=(), int8=False, calib_images=32,
                 dynamic_size=False):
    """Export, verify, write ``out`` and ``out.json``; returns the JSON record. Both are
    checked by the output guard (paths.py) before anything is loaded: neither may be the
    checkpoint or a config file. ``int8``: also write the quantized model (:mod:`.int8`).
    ``dynamic_size``: height and width free too, verified at two sizes."""
    from ..paths import guard_output_file
    from ..engine.checkpoint_load import inference_weights
    from ..predict import load_model

    if fmt not in FORMATS:
        raise ConfigError("--format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    if form not in FORMS:
        raise ConfigError("--form", f"{form!r} is not one of {', '.join(FORMS)}")
    if int8 and fmt != "onnx":
        raise ConfigError("--int8", f"int8 quantization runs on the ONNX file, not {fmt}", "use --format onnx")
    if not (tolerance > 0 and math.isfinite(tolerance)):
        raise ConfigError("--tolerance", f"must be a positive number, got {tolerance}")
    if fmt == "onnx" or int8:
        try:
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            raise ConfigError("--format", f"onnx export needs onnx and onnxruntime ({exc.name} is missing)",
                              "pip install up-trainer[export]") from None
    out = out or os.path.splitext(checkpoint)[0] + SUFFIX[fmt]
    for path in (out, out + ".json"):
        guard_output_file(path, "--out", inputs=[checkpoint, *config_files])
    chosen = inference_weights(checkpoint, use_ema)  # the checkpoint is read once
    model = load_model(cfg, checkpoint, "cpu", use_ema, weights=chosen)
    kind = getattr(model, "kind", None)
    exportable = isinstance(kind, str) and kind in EXPORTERS  # a family that registered its exporter
    detector = is_detector(model) or exportable
    if detector and fmt != "torchscript" and not exportable:
        families = ", ".join(EXPORTERS.names())
        raise ConfigError("--format", f"{fmt} export of {kind} is not supported (families: {families})",
                          "use --format torchscript" if is_detector(model) else
                          "use the checkpoint with up predict / up eval")
    if detector and fmt == "torchscript" and not is_detector(model):
        raise ConfigError("--format", f"torchscript export of {kind} is not supported", "use --format onnx or pt2")
    if dynamic_size and detector:
        _check_dynamic_detector(model, fmt)
    quantized = _check_quantized(model, fmt, int8, opset)
    if form == "end2end" and (not detector or fmt != "onnx"):
        raise ConfigError("--form", "end2end is the ONNX form of a detector (NMS inside the graph)",
                          "use --form raw" + (" or --format onnx" if detector else ""))
    weights = "ema" if chosen.kind == "ema" else "model"  # the sidecar's word for bare weights too
    size = _input_size(cfg, model, input_size)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    samples = val_samples(cfg, sum(VERIFY_BATCHES)) if detector else None
    with torch.no_grad():
        record = None
        if not detector:
            record = _export_tensors(ClassifierGraph(model).eval(), ["logits", "scores"], size, fmt, out, opset,
                                     dynamic_size)
            record["task"] = "cls"
        elif fmt == "torchscript":
            record = _export_scripted(model, size, out, samples, tolerance)
        elif form == "end2end" or kind not in DENSE_KINDS:
            from .detectors import export_dense_detector

            record = export_dense_detector(model, size, fmt, "end2end" if form == "end2end" else "dense", out,
                                           opset, VERIFY_BATCHES, dynamic_size, samples, tolerance)
        if record is None:
            record = _export_raw_heads(model, size, fmt, out, opset, dynamic_size)
    record.update(format=fmt, file=out, weights=weights, checkpoint=checkpoint, tolerance=tolerance,
                  verified_batches=list(VERIFY_BATCHES))
    record["classes"] = getattr(model, "recorded_classes", None)  # the label map trained on (None: unknown)
    if quantized:
        from ..quant.onnx_qdq import quant_record

        record["quantization"] = quant_record(model)
    write_json(out + ".json", record, indent=2)
    error = record["max_error"]
    check = record.get("verification")
    if check is not None:
        require_compared(check, fmt, out)
    elif not error <= tolerance:
        raise ExportMismatch(f"export verification failed: {fmt} output differs from PyTorch by "
                             f"max error {error:.3g} > tolerance {tolerance:g} ({out} kept for inspection)")
    log.info("exported %s weights to %s (%s); verified on batches %s: max error %.3g <= %g%s",
             weights, out, fmt, list(VERIFY_BATCHES), error, tolerance, "" if check is None else describe(check))
    if int8:
        from .int8 import quantize_export

        record["int8"] = quantize_export(cfg, record, calib_images, config_files)
    return record


def _check_quantized(model, fmt, int8, opset):
    """A fake-quant net exports as QDQ: 8-bit only (ONNX's QuantizeLinear), per-channel from opset 13."""
    from ..quant import is_quantized
    from ..quant.onnx_qdq import quant_record

    if not is_quantized(model):
        return False
    if int8:
        raise ConfigError("--int8", "the net is quantization-aware trained: its ONNX file is already int8 (QDQ)",
                          "export without --int8")
    bits = quant_record(model)["bits"]
    if fmt == "onnx" and bits != [8, 8]:
        raise ConfigError("--format", f"weights int{bits[0]} / activations int{bits[1]} cannot be written as ONNX "
                          "QuantizeLinear (8-bit only)", "use --format pt2 or torchscript (fake-quant ops)")
    if fmt == "onnx" and opset < 13:
        raise ConfigError("--opset", f"per-channel QDQ needs opset 13 or later, got {opset}")
    return True


def _check_dynamic_detector(model, fmt):
    """One line where a detector cannot take ``--dynamic-size`` (see docs/export.rst)."""
    kind = getattr(model, "kind", None)
    if fmt == "torchscript":
        raise ConfigError("--dynamic-size", f"{kind}: a TorchScript detector is the whole scripted model, which takes "
                          "images of any size already", "drop --dynamic-size, or use --format onnx or pt2")
    fixed = getattr(getattr(getattr(model, "detector", None), "transform", None), "fixed_size", None)
    if fixed:
        raise ConfigError("--dynamic-size", f"{kind}: the net resizes every image to its fixed size "
                          f"{fixed[0]}x{fixed[1]}, so no other size ever reaches the graph",
                          "export without --dynamic-size")


def second_size(size):
    """The other input size a dynamic-size export is verified at: twice the height and width."""
    return (size[0], size[1] * 2, size[2] * 2)


def _export_tensors(graph, output_names, size, fmt, out, opset, dynamic_size=False):
    """Trace ``graph`` at batch 2 with a free batch axis (and free height and width with
    ``dynamic_size``), reload the file, compare at the export size (and at :func:`second_size`)."""
    example = _inputs(size, TRACE_BATCH, seed=0)
    if fmt == "onnx":
        _onnx_export(graph, example, output_names, out, opset, dynamic_size)
        run = onnx_runner(out)
    elif fmt == "pt2":
        from .pt2 import pt2_runner, require_unbounded, save_pt2, size_range

        try:
            program = save_pt2(graph, (example,), out, dynamic_size)
        except Exception as exc:  # torch.export's shape errors have several types
            if not dynamic_size:
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError("--dynamic-size", f"torch.export cannot free this net's input size ({first[:200]})",
                              "export without --dynamic-size, at the size you need") from None
        if dynamic_size:
            require_unbounded(program, size[1:])
            least = size_range(program)
        run = pt2_runner(out)
    else:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit announces its deprecation
            traced = torch.jit.trace(graph, (example,), check_trace=False)
            traced.save(out)
            loaded = torch.jit.load(out)
        run = lambda x: list(loaded(x))  # noqa: E731
    error = 0.0
    sizes = [size, second_size(size)] if dynamic_size else [size]
    for j, at in enumerate(sizes):
        for i, batch in enumerate(VERIFY_BATCHES):
            x = _inputs(at, batch, seed=1 + i + 10 * j)
            want = list(graph(x))
            try:
                got = run(x)
            except Exception as exc:  # onnxruntime / torch raise their own types on a shape they cannot take
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ConfigError("--dynamic-size", f"the exported file does not run at {at[1]}x{at[2]} "
                                  f"({first[:200]})", "export without --dynamic-size, at the size you need") from None
            error = max(error, tensors_error(got, want, output_names, batch))
    shape = ["batch", size[0], "height", "width"] if dynamic_size else ["batch", *size]
    record = {"input": {"name": "image", "shape": shape}, "num_classes": int(graph(example)[0].shape[1]),
              "outputs": output_names, "max_error": error}
    if dynamic_size:
        record.update(dynamic_size=True, export_size=list(size[1:]), verified_sizes=[list(s[1:]) for s in sizes])
        if fmt == "pt2":
            record["size_range"] = least  # what the program's guards accept
    return record


def _onnx_export(graph, example, output_names, out, opset, dynamic_size=False):
    import warnings

    axes = {"image": {0: "batch", 2: "height", 3: "width"} if dynamic_size else {0: "batch"},
            **{n: {0: "batch"} for n in output_names if n not in ("anchors", "anchors_per_level")}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter announces its deprecation
        # The TorchScript-based exporter: seconds, where the torch.export one takes ten times
        # longer for these nets and gives the same graph.
        torch.onnx.export(graph, (example,), out, input_names=["image"], output_names=output_names,
                          dynamic_axes=axes, opset_version=opset, dynamo=False)
    from ..quant.onnx_qdq import fold_weight_quantizers

    fold_weight_quantizers(out)  # a fake-quant net's weights stored as integers (nothing to do otherwise)


def _export_raw_heads(model, size, fmt, out, opset, dynamic_size=False):
    from .decode import decode_params

    if model.kind not in DENSE_KINDS:
        raise ConfigError("--format", f"{model.kind} has no raw-head export (only {', '.join(DENSE_KINDS)})",
                          "use --format torchscript")
    graph = DenseHeadsGraph(model, size[1], size[2], dynamic_size).eval()
    record = _export_tensors(graph, graph.output_names, size, fmt, out, opset, dynamic_size)
    if dynamic_size:  # the runtime pads a batch as the detector's transform does
        record["input"]["size_divisible"] = int(model.detector.transform.size_divisible)
    from .detectors import preprocess_record

    record.update(task="det", kind=model.kind, num_classes=int(model.num_classes), form="heads",
                  preprocess=preprocess_record(model, size), post_processing="decode step (up_trainer.export.decode)",
                  decode=dict(decode_params(model, graph), image_size=[size[1], size[2]]))
    record["input"]["range"] = "[0, 1], resized to the export size; normalised inside the graph"
    return record


def _export_scripted(model, size, out, samples, tolerance):
    """The whole detector, post-processing included, as TorchScript; None when TorchScript
    cannot compile this net (the caller then exports raw heads)."""
    import warnings

    from .detectors import verify_detections

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script announces its deprecation
        try:
            scripted = scripted_detector(model)
        except Exception as exc:  # TorchScript's compile errors have no common type
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.warning("torchscript: the detector does not compile with post-processing (%s); "
                        "exporting raw head outputs and anchors instead", first)
            return None
        scripted.save(out)
        loaded = ScriptedRunner(torch.jit.load(out))
        check, outcome = verify_detections(model, loaded, [size], VERIFY_BATCHES, samples, scripted_cuts(model),
                                           tolerance, crop=False)
    return {"task": "det", "num_classes": int(model.num_classes), "input": {"name": "images", "shape": "list of 3xHxW float tensors in [0, 1], any size"},
            "outputs": "one {boxes (xyxy, input pixels), scores, labels (1..C)} per image",
            "post_processing": "included", "max_error": outcome.max_error,
            "verified_detections": outcome.compared, "verification": check}


class ScriptedRunner:
    """A loaded TorchScript detector behind the model's ``batch -> {"detections"}`` call."""

    def __init__(self, module):
        self.module, self.record = module, {}

    def __call__(self, batch):
        return {"detections": self.module(batch["image"])}


def scripted_cuts(model):
    """The score threshold, detections per image and NMS IoU of a torchvision detector."""
    from .compare import Cuts

    det = model.detector
    part = getattr(det, "roi_heads", det)
    return Cuts(float(part.score_thresh), int(part.detections_per_img), float(part.nms_thresh))
