"""The QDQ ONNX file of a fake-quant net: what the exporter writes, made deployable.

torch's exporter writes each fake quantizer as QuantizeLinear -> DequantizeLinear, for weights
too, so the file holds every weight in float32 and quantizes it at each run. Here each weight's
QuantizeLinear is computed once (as torch computes it: round(w * (1 / scale)) + zero point,
clamped) and its integers stored as the DequantizeLinear's int8 / uint8 input: the file shrinks
about fourfold and is the form TensorRT's explicit quantization and onnxruntime's QDQ fusion read.
"""
import numpy as np
import torch

from .fake_quant import FakeQuantizer


def _initializers(graph):
    return {t.name: t for t in graph.initializer}


def _constant(name, inits, producers):
    """The numpy value of ``name`` when it is an initializer or a Constant node's output."""
    from onnx import numpy_helper

    if name in inits:
        return numpy_helper.to_array(inits[name])
    node = producers.get(name)
    if node is not None and node.op_type == "Identity":
        return _constant(node.input[0], inits, producers)
    if node is not None and node.op_type == "Constant":
        return numpy_helper.to_array(node.attribute[0].t)
    return None


def fold_weight_quantizers(path):
    """Rewrite ``path`` in place: every QuantizeLinear of a constant becomes stored integers.
    Returns how many were folded."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    graph = model.graph
    inits = _initializers(graph)
    producers = {o: n for n in graph.node for o in n.output}
    folded, keep = 0, []
    for node in graph.node:
        value = _constant(node.input[0], inits, producers) if node.op_type == "QuantizeLinear" else None
        if value is None:
            keep.append(node)
            continue
        scale = _constant(node.input[1], inits, producers)
        zero_point = _constant(node.input[2], inits, producers) if len(node.input) > 2 else None
        if scale is None or zero_point is None:
            keep.append(node)
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        info = np.iinfo(zero_point.dtype)
        shape = [1] * value.ndim
        if scale.ndim == 1 and scale.size > 1:
            shape[axis] = -1
        inv = 1.0 / torch.from_numpy(scale.astype(np.float32)).reshape(shape)
        q = torch.round(torch.from_numpy(value.astype(np.float32)) * inv) + \
            torch.from_numpy(zero_point.astype(np.int32)).reshape(shape)
        q = torch.clamp(q, info.min, info.max).numpy().astype(zero_point.dtype)
        graph.initializer.append(numpy_helper.from_array(q, node.output[0]))
        folded += 1
    if folded:
        del graph.node[:]
        graph.node.extend(keep)
        used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        alive = [t for t in graph.initializer if t.name in used]
        del graph.initializer[:]
        graph.initializer.extend(alive)
        onnx.save(model, path)
    return folded


def quant_record(model):
    """What the export's ``.json`` says of a fake-quant net's quantization."""
    from .apply import describe

    quantizers = [m for m in model.modules() if isinstance(m, FakeQuantizer)]
    weight = next(q.scheme for q in quantizers if q.is_weight)
    activation = next(q.scheme for q in quantizers if not q.is_weight)
    return {"format": "QDQ", "backend": weight["backend"], "layers": sum(q.is_weight for q in quantizers), "weights": describe(weight),
            "activations": describe(activation), "bits": [weight["bits"], activation["bits"]]}
