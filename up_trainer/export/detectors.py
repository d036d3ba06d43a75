"""Detectors of the dense families to ONNX or pt2, in two forms, verified through :mod:`.runtime`.

* ``end2end`` (ONNX): ``image`` [N, 3, H, W] and ``image_sizes`` [N, 2] (h, w before
  padding) in; ``num_detections``, ``boxes``, ``scores``, ``labels`` out (:mod:`.select`):
  decoding, thresholds, top-k and NMS are inside the graph.
* ``dense`` (ONNX, pt2): ``image`` in; ``boxes`` [N, A, 4] and ``scores`` [N, A, K] out
  (:mod:`.dense`); the decode step is :class:`.select.Select` with the ``decode`` parameters
  of the record (per level: anchors, k, threshold; NMS threshold; detections per image).

RetinaNet and FCOS keep their ``heads`` form (raw head outputs and anchors, :mod:`.decode`)
as the raw form. Verification runs the written file through :class:`.runtime.ExportedModel`
on the same images as the PyTorch model (batch sizes 1 and 3, the last image of a batch
smaller, so padding and clipping are exercised) and compares the detections.
"""
import torch

from .dense import TORCHVISION_DENSE, dense_graph
from .select import EndToEnd
from .two_stage import OUTPUT_NAMES as TWO_STAGE_OUTPUTS, TWO_STAGE_KINDS, TwoStageEndToEnd, TwoStageGraph

TRACE_BATCH = 2


def preprocess_record(model, size):
    """How images reach the graph (see :mod:`.runtime`)."""
    if model.kind in TORCHVISION_DENSE or model.kind in ("faster_rcnn",):
        t = model.detector.transform
        return {"type": "torchvision", "min_size": int(t.min_size[-1]), "max_size": int(t.max_size),
                "size_divisible": int(t.size_divisible), "image_mean": [float(v) for v in t.image_mean],
                "fixed_size": list(t.fixed_size) if getattr(t, "fixed_size", None) else None}
    mean = getattr(model, "image_mean", None)  # the ATSS net normalises, then pads with 0
    return {"type": "pad", "size": [size[1], size[2]],
            "image_mean": None if mean is None else [float(v) for v in mean.flatten()]}


def build_graph(model, size, form):
    """(module, input names, output names, decode record or None)."""
    if model.kind in TWO_STAGE_KINDS:
        graph = TwoStageGraph(model, size[1], size[2]).eval()
        if form == "end2end":
            return TwoStageEndToEnd(graph).eval(), ["image", "image_sizes"], list(TwoStageEndToEnd.output_names), None
        return graph, ["image", "image_sizes"], list(TWO_STAGE_OUTPUTS), graph.spec.to_json()
    dense = dense_graph(model, size[1], size[2])
    if form == "end2end":
        return EndToEnd(dense).eval(), ["image", "image_sizes"], list(EndToEnd.output_names), None
    return dense, ["image"], ["boxes", "scores"], dense.spec.to_json()


def example_inputs(size, batch, names, seed):
    g = torch.Generator().manual_seed(seed)
    image = torch.rand((batch, *size), generator=g)
    if names == ["image"]:
        return (image,)
    return image, torch.tensor([[size[1], size[2]]] * batch, dtype=torch.int64)


def verification_images(size, batch, seed):
    """``batch`` images at the export size, the last of several 3/4 as wide (and zero-padded
    where the graph needs the full size)."""
    g = torch.Generator().manual_seed(seed)
    images = list(torch.rand((batch, *size), generator=g))
    if batch > 1:
        images[-1] = images[-1][:, :, : size[2] * 3 // 4].contiguous()
    return images


def write_graph(graph, inputs, input_names, output_names, fmt, out, opset):
    if fmt == "pt2":
        from .pt2 import save_pt2

        save_pt2(graph, inputs, out)
        return
    import warnings

    axes = {n: {0: "batch"} for n in input_names + output_names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter announces its deprecation
        torch.onnx.export(graph, tuple(inputs), out, input_names=input_names, output_names=output_names,
                          dynamic_axes=axes, opset_version=opset, dynamo=False)


def export_dense_detector(model, size, fmt, form, out, opset, verify_batches):
    """Write ``out`` and return its record (``max_error`` measured on reload)."""
    from .runtime import ExportedModel
    from .verify import detections_error

    graph, inputs, outputs, decode = build_graph(model, size, form)
    if form == "dense" and model.kind in TWO_STAGE_KINDS:
        form = "two_stage"
    with torch.no_grad():
        write_graph(graph, example_inputs(size, TRACE_BATCH, inputs, 0), inputs, outputs, fmt, out, opset)
    record = {"task": "det", "kind": model.kind, "num_classes": int(model.num_classes), "form": form,
              "input": {"names": inputs, "shape": ["batch", *size],
                        "range": "the model's input (the test dataset's model input), zero-padded "
                                 "bottom/right to the export size"},
              "outputs": outputs, "preprocess": preprocess_record(model, size), "format": fmt,
              "post_processing": "included" if form == "end2end" else "decode step (up_trainer.export.select)"}
    if form == "two_stage":
        record["raw_outputs"] = ("proposals [N, P, 4] (rows past num_proposals zero), num_proposals [N], boxes "
                                 "[N, P, K, 4] per class from the last box stage, scores [N, P, K] (-1 on padding "
                                 "rows): the detections before the per-class score threshold and NMS")
    if decode is not None:
        record["decode"] = decode
    loaded = ExportedModel(out, record)
    error = 0.0
    for i, batch in enumerate(verify_batches):
        images = verification_images(size, batch, seed=1 + i)
        with torch.no_grad():
            want = model({"image": images})["detections"]
        error = max(error, detections_error(loaded({"image": images})["detections"], want, batch))
    record["max_error"] = error
    return record
