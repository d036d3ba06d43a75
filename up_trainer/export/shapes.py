"""Sizes that follow the input size inside an exported graph (``--dynamic-size``).

A detector exported with a free height and width cannot bake in what depends on them: the
anchors / points of each pyramid level, how many there are, the top-k that keeps ``min(k, n)``
of them, the threshold UP skips on small levels. While a graph is recorded, a feature map's
size is not a Python int: under the TorchScript-based ONNX exporter (tracing) it is a 0-dim
tensor the tracer follows, under ``torch.export`` a SymInt. These helpers compute with either,
and with plain ints when the module runs eagerly, so one code path serves all three.
"""
import torch


def at_most(k, n):
    """``min(k, n)`` that stays a function of the shape ``n`` in the recorded graph."""
    if isinstance(n, torch.Tensor):  # ONNX tracing: a traced size
        return torch.clamp(n, max=int(k))
    return torch.sym_min(int(k), n)  # an int, or a SymInt under torch.export


def threshold(thresh, n, small):
    """``thresh`` where the level has more than ``small`` anchors, else 0 (UP's rule for small
    levels; ``small`` 0: always ``thresh``)."""
    if small <= 0:
        return thresh
    if isinstance(n, int):
        return thresh if n > small else 0.0
    count = n if isinstance(n, torch.Tensor) else torch.scalar_tensor(n)  # SymInt: no guard on its value
    return torch.where(count > small, torch.tensor(float(thresh)), torch.tensor(0.0))


def sizes_tensor(counts):
    """Per-level counts as an int64 tensor [L] (an output of a dynamic-size graph)."""
    parts = [c.reshape(1).to(torch.int64) if isinstance(c, torch.Tensor)
             else torch.scalar_tensor(c, dtype=torch.int64).reshape(1) for c in counts]
    return torch.cat(parts)


def map_count(feature_map, per_location=1):
    """Anchors of one H x W level: H * W * ``per_location``."""
    return feature_map.shape[-2] * feature_map.shape[-1] * per_location
