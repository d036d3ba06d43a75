"""``--format pt2``: a torch.export ExportedProgram, saved with ``torch.export.save``.

The batch axis is dynamic (``torch.export.Dim.DYNAMIC``), and a classifier's height and width
with ``--dynamic-size``; everything else is fixed at the export size. Loading needs only torch
(``torch.export.load(path).module()``), no project code.
"""
import torch


def save_pt2(graph, example_inputs, out, dynamic_size=False):
    """Export ``graph`` on ``example_inputs`` (a tuple of tensors, batch first) and save it;
    ``dynamic_size``: the first input's height and width (dims 2 and 3) free too."""
    free = torch.export.Dim.DYNAMIC
    dynamic = tuple({0: free, 2: free, 3: free} if dynamic_size and i == 0 else {0: free}
                    for i, _ in enumerate(example_inputs))
    program = torch.export.export(graph, tuple(example_inputs), dynamic_shapes=dynamic, strict=False)
    torch.export.save(program, out)


def pt2_runner(path):
    """A callable: input tensors -> list of output tensors, from the saved program."""
    module = torch.export.load(path).module()

    def run(*inputs):
        with torch.no_grad():
            out = module(*inputs)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    return run
