"""Detectors of the dense families to ONNX or pt2, in two forms, verified through :mod:`.runtime`.

* ``end2end`` (ONNX): ``image`` [N, 3, H, W] and ``image_sizes`` [N, 2] (h, w before
  padding) in; ``num_detections``, ``boxes``, ``scores``, ``labels`` out (:mod:`.select`):
  decoding, thresholds, top-k and NMS are inside the graph.
* ``dense`` (ONNX, pt2): ``image`` in; ``boxes`` [N, A, 4] and ``scores`` [N, A, K] out
  (:mod:`.dense`); the decode step is :class:`.select.Select` with the ``decode`` parameters
  of the record (per level: anchors, k, threshold; NMS threshold; detections per image).

RetinaNet and FCOS keep their ``heads`` form (raw head outputs and anchors, :mod:`.decode`)
as the raw form. Verification runs the written file through :class:`.runtime.ExportedModel`
on the same images as the PyTorch model (the val set's, :mod:`.inputs`; batch sizes 1 and 3,
the last image of a batch narrower, so padding and clipping are exercised) and compares the
detections by the rule of :mod:`.compare`, lowering the score threshold while none exist.

With ``dynamic`` (``--dynamic-size``) the height and width are free axes of the graph: anchors /
points, per-level counts, top-k sizes and UP's small-level rule follow the input's size
(:mod:`.shapes`); the raw outputs gain ``level_sizes`` (per-level counts, for the decode step),
and verification runs at the export size and at :func:`second_size`. A runtime pads a batch to
its largest image rounded up to ``size_divisible``, as the model itself pads.
"""
import torch

from .compare import Cuts
from ..registry import EXPORTERS
from .dense import dense_graph
from .select import EndToEnd
from .two_stage import OUTPUT_NAMES as TWO_STAGE_OUTPUTS, TwoStageEndToEnd

TRACE_BATCH = 2


def is_two_stage(model):
    return EXPORTERS.get(model.kind, "--format").two_stage


def preprocess_record(model, size):
    """How images reach the graph (see :mod:`.runtime`)."""
    if EXPORTERS.get(model.kind, "--format").preprocess == "torchvision":
        t = model.detector.transform
        return {"type": "torchvision", "min_size": int(t.min_size[-1]), "max_size": int(t.max_size),
                "size_divisible": int(t.size_divisible), "image_mean": [float(v) for v in t.image_mean],
                "fixed_size": list(t.fixed_size) if getattr(t, "fixed_size", None) else None}
    mean = getattr(model, "image_mean", None)  # the ATSS net normalises, then pads with 0
    return {"type": "pad", "size": [size[1], size[2]],
            "image_mean": None if mean is None else [float(v) for v in mean.flatten()]}


SIZE_DIVISIBLE = 32  # the dense and UP two-stage nets pad a batch to a multiple of this (box_ops)


def _up32(v):
    return max(SIZE_DIVISIBLE, -(-int(v) // SIZE_DIVISIBLE) * SIZE_DIVISIBLE)


def second_size(size, resized=False):
    """The other size a dynamic-size detector is verified at: twice as high and 1.5 times as
    wide (rounded up to 32), so height and width change by different factors and no pyramid
    level shrinks to 1 pixel (torch.export specialises size-1 axes). A net that resizes each
    image to fit its min_size / max_size (``resized``: torchvision's) is given images half as
    wide instead, which it resizes to a batch of another padded size (64 x 64 -> 64 x 32 for
    min_size = max_size = 64), where larger ones would come back to the export size."""
    if resized:
        return (size[0], size[1], _up32(size[2] / 2))
    return (size[0], size[1] * 2, _up32(size[2] * 1.5))


def build_graph(model, size, form, dynamic=False):
    """(module, input names, output names, decode record or None)."""
    if is_two_stage(model):
        graph = EXPORTERS.get(model.kind, "--format")(model, size[1], size[2], dynamic).eval()
        if form == "end2end":
            return TwoStageEndToEnd(graph).eval(), ["image", "image_sizes"], list(TwoStageEndToEnd.output_names), None
        return graph, ["image", "image_sizes"], list(TWO_STAGE_OUTPUTS), graph.spec.to_json()
    dense = dense_graph(model, size[1], size[2], dynamic)
    if form == "end2end":
        return EndToEnd(dense).eval(), ["image", "image_sizes"], list(EndToEnd.output_names), None
    return dense, ["image"], ["boxes", "scores"] + (["level_sizes"] if dynamic else []), dense.spec.to_json()


def example_inputs(size, batch, names, seed):
    g = torch.Generator().manual_seed(seed)
    image = torch.rand((batch, *size), generator=g)
    if names == ["image"]:
        return (image,)
    return image, torch.tensor([[size[1], size[2]]] * batch, dtype=torch.int64)


def write_graph(graph, inputs, input_names, output_names, fmt, out, opset, dynamic=False):
    if fmt == "pt2":
        from .pt2 import require_unbounded, save_pt2

        program = save_pt2(graph, inputs, out, dynamic)
        if dynamic:
            require_unbounded(program, inputs[0].shape[-2:])
        return program
    import warnings

    axes = {n: {0: "batch"} for n in input_names + output_names if n != "level_sizes"}
    if dynamic:
        axes["image"] = {0: "batch", 2: "height", 3: "width"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter announces its deprecation
        torch.onnx.export(graph, tuple(inputs), out, input_names=input_names, output_names=output_names,
                          dynamic_axes=axes, opset_version=opset, dynamo=False)


def export_dense_detector(model, size, fmt, form, out, opset, verify_batches, dynamic=False, samples=None,
                          tolerance=1e-4):
    """Write ``out``; returns its record, the verification's (:func:`verify_detections` on
    ``samples``, see :mod:`.inputs`) in it: ``max_error`` over the paired detections,
    ``verified_detections`` how many were paired, ``verification`` the rest."""
    from .runtime import ExportedModel

    graph, inputs, outputs, decode = build_graph(model, size, form, dynamic)
    if form == "dense" and is_two_stage(model):
        form = "two_stage"
    with torch.no_grad():
        program = write_graph(graph, example_inputs(size, TRACE_BATCH, inputs, 0), inputs, outputs, fmt, out, opset,
                              dynamic)
    shape = ["batch", size[0], "height", "width"] if dynamic else ["batch", *size]
    padded = ("zero-padded bottom/right to the largest image of the batch rounded up to "
              f"{SIZE_DIVISIBLE}" if dynamic else "zero-padded bottom/right to the export size")
    record = {"task": "det", "kind": model.kind, "num_classes": int(model.num_classes), "form": form,
              "input": {"names": inputs, "shape": shape,
                        "range": f"the model's input (the test dataset's model input), {padded}"},
              "outputs": outputs, "preprocess": preprocess_record(model, size), "format": fmt,
              "post_processing": "included" if form == "end2end" else "decode step (up_trainer.export.select)"}
    if form == "two_stage":
        record["raw_outputs"] = ("proposals [N, P, 4] (rows past num_proposals zero), num_proposals [N], boxes "
                                 "[N, P, K, 4] per class from the last box stage, scores [N, P, K] (-1 on padding "
                                 "rows): the detections before the per-class score threshold and NMS")
    if decode is not None:
        record["decode"] = decode
    sizes = [size]
    if dynamic:
        record["input"]["size_divisible"] = int(record["preprocess"].get("size_divisible", SIZE_DIVISIBLE))
        other = second_size(size, record["preprocess"]["type"] == "torchvision")
        if program is not None:
            from .pt2 import size_range

            record["size_range"] = least = size_range(program)  # what the program's guards accept
            # below the program's smallest size the runtime pads up to it: verify where it does not
            other = (other[0], max(other[1], _up32(least["height"][0])), max(other[2], _up32(least["width"][0])))
        sizes += [other] if other != tuple(size) else []
        record.update(dynamic_size=True, export_size=list(size[1:]), verified_sizes=[list(s[1:]) for s in sizes])
    spec = graph.select.spec if hasattr(graph, "select") else graph.spec
    crop = record["preprocess"]["type"] == "pad" and not dynamic  # the graph takes images up to its size
    loaded = ExportedModel(out, record)
    dense = graph if hasattr(graph, "levels") else getattr(graph, "dense", None)
    record["verification"], outcome = verify_detections(model, loaded, sizes, verify_batches, samples,
                                                        Cuts.from_spec(spec), tolerance, crop,
                                                        pre_nms_cuts(dense, loaded) if dense is not None else None)
    record["max_error"], record["verified_detections"] = outcome.max_error, outcome.compared
    return record


def verify_detections(model, loaded, sizes, verify_batches, samples, cuts, tolerance, crop, pre_nms=None):
    """Compare ``loaded`` (an :class:`.runtime.ExportedModel`) with ``model`` on ``samples`` (at
    the first size; random images at the others, or where there are no samples), lowering the
    score threshold while nothing is detected (:mod:`.inputs`); returns the record's
    ``verification`` and the :class:`.compare.Outcome`. ``pre_nms``: images -> per image the
    scores where a pre-NMS top-k cuts (:func:`pre_nms_cuts`), or None."""
    from .inputs import lower_thresholds, lowered_record, threshold_holder

    outcome = _compare_on(model, loaded, sizes, verify_batches, samples, cuts, tolerance, crop, pre_nms)
    first, holder, record = cuts.thresh, threshold_holder(model), loaded.record
    for thresh in lower_thresholds(first) if outcome.compared == 0 and not outcome.problem else ():
        lowered = lowered_record(record, thresh)
        if holder is None or lowered is None:
            break  # the threshold is inside the file
        cuts = Cuts(thresh, cuts.detections, cuts.nms_thresh)
        old, holder.score_thresh, loaded.record = holder.score_thresh, thresh, lowered
        try:
            outcome = _compare_on(model, loaded, sizes, verify_batches, samples, cuts, tolerance, crop, pre_nms)
        finally:
            holder.score_thresh, loaded.record = old, record
        if outcome.compared or outcome.problem:
            break
    count = sum(verify_batches)
    result = {"images": (f"{min(count, len(samples))} of the val set (dataset.test)" if samples else
                         f"{count} seeded random images") + (", random images at the other size" if len(sizes) > 1
                                                             else ""),
              "compared_detections": outcome.compared, "left_out": outcome.left_out,
              "left_out_by": outcome.reasons, "score_thresh": cuts.thresh, "problem": outcome.problem}
    if cuts.thresh != first:
        result["model_score_thresh"] = first  # it gave nothing to compare
    return result, outcome


def pre_nms_cuts(dense, loaded):
    """images -> per image, the score of the last candidate each level's pre-NMS top-k keeps
    (per class where the level ranks per class), from the PyTorch dense module on the batch the
    exported file is given; None for a net whose runtime resizes first (torchvision's)."""
    def cuts(images):
        pre = loaded.record["preprocess"]
        if pre["type"] != "pad":
            return None
        x, _ = loaded._pad(images, fill=pre.get("image_mean"))
        with torch.no_grad():
            _, scores, counts = dense.levels(x)
        out, start = [[] for _ in images], 0
        for level, count in zip(dense.spec.levels, counts):
            block, start = scores[:, start:start + int(count)], start + int(count)
            for i in range(len(images)):
                if level.per_class and block.shape[1] > level.k:
                    out[i] += block[i].topk(level.k, dim=0).values[-1].tolist()
                elif not level.per_class and block[i].numel() > level.k:
                    out[i].append(float(block[i].flatten().topk(level.k).values[-1]))
        return out

    return cuts


def _compare_on(model, loaded, sizes, verify_batches, samples, cuts, tolerance, crop, pre_nms=None):
    from .compare import Outcome, compare_detections
    from .inputs import batch_images, random_samples
    from .verify import require_finite

    outcome = Outcome()
    for j, at in enumerate(sizes):
        pool = samples if samples and j == 0 else random_samples(at, sum(verify_batches), seed=1 + 10 * j)
        start = 0
        for batch in verify_batches:
            chunk = [pool[(start + k) % len(pool)] for k in range(batch)]
            start += batch
            images = batch_images(chunk, at, crop)
            with torch.no_grad():
                want = model({"image": images})["detections"]
            got = loaded({"image": images})["detections"]
            for i, (g, w) in enumerate(zip(got, want)):
                for key in ("boxes", "scores"):
                    require_finite(g[key], w[key], f"detections[{i}].{key}", batch)
            outcome.add(compare_detections(got, want, cuts, tolerance, [c.name for c in chunk],
                                           [max(im.shape[-2:]) for im in images], pre_nms and pre_nms(images)))
    return outcome
