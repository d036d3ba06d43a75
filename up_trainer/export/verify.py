"""Exported model against the PyTorch model on the same inputs.

Error of one output element: |exported - pytorch| / (1 + |pytorch|): absolute for values
below 1 (scores, logits near 0), relative above (box coordinates in pixels). The export
passes when the largest error over every output and every input is <= the tolerance.
Detections must also agree in count and labels; a count that differs is an infinite error.
"""
import math

import torch


def max_error(got, want):
    got, want = torch.as_tensor(got).double(), torch.as_tensor(want).double()
    if got.shape != want.shape:
        return math.inf
    if got.numel() == 0:
        return 0.0
    return float(((got - want).abs() / (1.0 + want.abs())).max())


def tensors_error(got, want):
    return max((max_error(g, w) for g, w in zip(got, want)), default=0.0) if len(got) == len(want) else math.inf


def detections_error(got, want):
    """Two lists of {boxes, scores, labels}: max error of boxes and scores, inf if labels differ."""
    if len(got) != len(want):
        return math.inf
    worst = 0.0
    for g, w in zip(got, want):
        if g["labels"].shape != w["labels"].shape or not torch.equal(g["labels"].cpu(), w["labels"].cpu()):
            return math.inf
        worst = max(worst, max_error(g["boxes"], w["boxes"]), max_error(g["scores"], w["scores"]))
    return worst


def onnx_runner(path):
    """A callable: numpy-compatible tensor batch -> list of output tensors, via onnxruntime."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # warnings about unused initializers are noise here
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def run(batch):
        return [torch.from_numpy(o) for o in session.run(None, {name: batch.numpy()})]

    return run
