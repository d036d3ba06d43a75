"""Exported model against the PyTorch model on the same inputs.

Error of one output element: |exported - pytorch| / (1 + |pytorch|): absolute for values
below 1 (scores, logits near 0), relative above (box coordinates in pixels). The export
passes when the largest error over every output and every input is <= the tolerance.
Detections must also agree in count and labels; a count that differs is an infinite error.

A NaN or infinite value in any output, of the PyTorch model or of the exported file, fails
the verification outright (NaN compares as neither larger nor smaller than anything, so a
largest-error search would pass over it): :class:`ExportMismatch` names the output, the batch
size and how many values on each side are not finite.
"""
import math

import torch

from ..errors import UserError


class ExportMismatch(UserError):
    """The exported model disagrees with PyTorch beyond the tolerance, or either gives NaN/inf."""

    exit_code = 1


def _non_finite(value):
    value = torch.as_tensor(value)
    return int((~torch.isfinite(value)).sum()) if value.is_floating_point() else 0


def require_finite(got, want, name, batch):
    """Raise ExportMismatch when ``got`` (exported) or ``want`` (PyTorch) holds NaN or inf."""
    bad_got, bad_want = _non_finite(got), _non_finite(want)
    if bad_got or bad_want:
        where = [f"{n} of {torch.as_tensor(t).numel()} in {side}" for n, t, side in
                 ((bad_want, want, "the PyTorch model"), (bad_got, got, "the exported file")) if n]
        why = "check the checkpoint's weights" if bad_want else "the export changed the computation"
        raise ExportMismatch(f"export verification failed: output {name!r} at batch size {batch} has non-finite "
                             f"values (NaN or inf): {', '.join(where)}; {why}")


def max_error(got, want):
    got, want = torch.as_tensor(got).double(), torch.as_tensor(want).double()
    if got.shape != want.shape:
        return math.inf
    if got.numel() == 0:
        return 0.0
    error = float(((got - want).abs() / (1.0 + want.abs())).max())
    return error if math.isfinite(error) else math.inf


def tensors_error(got, want, names=None, batch=None):
    """Largest error over lists of output tensors named ``names`` (ExportMismatch on NaN/inf)."""
    if len(got) != len(want):
        return math.inf
    names = names or [f"#{i}" for i in range(len(want))]
    for g, w, name in zip(got, want, names):
        require_finite(g, w, name, batch)
    return max((max_error(g, w) for g, w in zip(got, want)), default=0.0)


def detections_error(got, want, batch=None):
    """Two lists of {boxes, scores, labels}: max error of boxes and scores, inf if labels differ
    (ExportMismatch on NaN/inf)."""
    if len(got) != len(want):
        return math.inf
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        for key in ("boxes", "scores"):
            require_finite(g[key], w[key], f"detections[{i}].{key}", batch)
        if g["labels"].shape != w["labels"].shape:
            return math.inf
        if torch.equal(g["labels"].cpu(), w["labels"].cpu()):
            error = max(max_error(g["boxes"], w["boxes"]), max_error(g["scores"], w["scores"]))
        else:
            error = math.inf
        if error > 1e-3:  # detections of equal score may come in another order: match them
            error = _matched_error(g, w)
        worst = max(worst, error)
    return worst


def _matched_error(got, want):
    """Largest error when each wanted detection is paired with the closest unpaired one of the
    same label (inf when one has no partner): the order of equal scores is not part of a result."""
    free = list(range(len(got["scores"])))
    worst = 0.0
    for j in range(len(want["scores"])):
        best, pick = math.inf, None
        for i in free:
            if int(got["labels"][i]) != int(want["labels"][j]):
                continue
            e = max(max_error(got["boxes"][i], want["boxes"][j]), max_error(got["scores"][i], want["scores"][j]))
            if e < best:
                best, pick = e, i
        if pick is None:
            return math.inf
        free.remove(pick)
        worst = max(worst, best)
    return worst


def onnx_runner(path, threads=None):
    """A callable: input tensors (in the graph's input order) -> list of output tensors, via
    onnxruntime on the CPU (``threads``: intra-op threads, default onnxruntime's)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # warnings about unused initializers are noise here
    if threads:
        options.intra_op_num_threads = int(threads)
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(*inputs):
        feed = {n: torch.as_tensor(x).numpy() for n, x in zip(names, inputs)}
        return [torch.from_numpy(o) for o in session.run(None, feed)]

    return run
