"""``--format pt2``: a torch.export ExportedProgram, saved with ``torch.export.save``.

The batch axis is dynamic (``torch.export.Dim.DYNAMIC``), and the height and width with
``--dynamic-size``; everything else is fixed at the export size. torch.export specialises an axis
of size 1: a detector traced at a size where a pyramid level is 1 pixel high or wide gets a
program bounded to sizes where that level stays 1 pixel. :func:`size_range` reads the sizes the
program accepts, so the export can refuse such a program in one line. Loading needs only torch
(``torch.export.load(path).module()``), no project code.
"""
import math

import torch


def save_pt2(graph, example_inputs, out, dynamic_size=False):
    """Export ``graph`` on ``example_inputs`` (a tuple of tensors, batch first) and save it;
    ``dynamic_size``: the first input's height and width (dims 2 and 3) free too."""
    free = torch.export.Dim.DYNAMIC
    dynamic = tuple({0: free, 2: free, 3: free} if dynamic_size and i == 0 else {0: free}
                    for i, _ in enumerate(example_inputs))
    program = torch.export.export(graph, tuple(example_inputs), dynamic_shapes=dynamic, strict=False)
    torch.export.save(program, out)
    return program


def size_range(program):
    """{"height": [lo, hi], "width": [lo, hi]} of the first input that ``program`` accepts
    (hi None: unbounded; lo == hi: fixed)."""
    name = program.graph_signature.user_inputs[0]
    node = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == name)
    out = {}
    for axis, dim in (("height", 2), ("width", 3)):
        size = node.meta["val"].shape[dim]
        if isinstance(size, int):
            out[axis] = [size, size]
            continue
        vr = program.range_constraints.get(size.node.expr)
        lo, hi = (int(vr.lower), None if math.isinf(float(vr.upper)) else int(vr.upper)) if vr else (0, None)
        out[axis] = [lo, hi]
    return out


def pt2_runner(path):
    """A callable: input tensors -> list of output tensors, from the saved program. A file that
    is not a zip archive (what torch.export.save writes) is one line before torch reads it, and
    torch's own logger is quiet while it loads: it logs a whole traceback for a file it cannot
    read before raising, which the caller reports in one line."""
    import logging
    import zipfile

    from ..errors import ConfigError

    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            head = f.read(16)
        what = " (its bytes look like an ONNX file: name it .onnx)" if _looks_onnx(head) else ""
        raise ConfigError("--model", f"{path}: not a pt2 file, which is a zip archive written by "
                          f"torch.export.save{what}")
    logger, caught = logging.getLogger("torch.export"), []
    handler = logging.Handler()
    handler.emit = caught.append
    kept = logger.propagate, logger.handlers  # torch gives this logger a stderr handler of its own
    logger.handlers, logger.propagate = [handler], False
    try:
        module = torch.export.load(path).module()
    except Exception as exc:  # torch.export raises several types; the cause is in what it logged
        causes = [r.exc_info[1] for r in caught if r.exc_info and r.exc_info[1] is not None]
        cause = str(causes[-1] if causes else exc).strip().splitlines()
        raise ConfigError("--model", f"{path}: pt2 cannot load it ({(cause[0] if cause else type(exc).__name__)[:200]})") \
            from None
    finally:
        logger.propagate, logger.handlers = kept

    def run(*inputs):
        with torch.no_grad():
            out = module(*inputs)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    return run


def require_unbounded(program, size):
    """ConfigError where ``program`` caps the height or width (traced at ``size`` where a level
    was 1 pixel: torch.export fixes such an axis, and the sizes that keep it at 1 pixel are all
    the program takes)."""
    from ..errors import ConfigError

    for axis, (lo, hi) in size_range(program).items():
        if hi is not None:
            raise ConfigError("--dynamic-size", f"torch.export bounds the {axis} to {lo}..{hi} at the export size "
                              f"{size[0]}x{size[1]}: a pyramid level is 1 pixel there, and torch.export fixes axes "
                              "of size 1", "export at a larger --input-size C,H,W, every level at least 2 pixels")


def _looks_onnx(head):
    """An ONNX file is a protobuf ModelProto: it opens with field 1 (ir_version, varint: 0x08)
    followed by field 2, 3 or 8 (producer name / version, opset: 0x12, 0x1a, 0x42)."""
    return len(head) >= 3 and head[0] == 0x08 and head[1] < 0x80 and head[2] in (0x12, 0x1a, 0x3a, 0x42)
