"""Weight masks: which layers are masked, how each mask is computed, and checks on saved ones.

Masks are computed here rather than with ``torch.ao.pruning.WeightNormSparsifier``: that
sparsifier ranks blocks of a 2-D weight by a norm and reshapes through parametrizations, so
a convolution's (out, in, kh, kw) weight needs a flattening it does not do, and a checkpoint
would hold parametrized names instead of the model's own. A mask here is a plain bool tensor
of the weight's shape, kept by the sparsity hook and saved in its checkpoint state.

N:M (semi-structured) masks follow NVIDIA's 1-D pattern (ASP's ``m4n2_1d``): groups of M
consecutive weights along the input dimension (the input channels of a convolution, at each
output channel and kernel position) keep the N of largest magnitude, so every group has
exactly M - N zeros. Level masks zero the given fraction of a layer's weights by magnitude.
"""
import torch
from torch import nn

# The layers a mask applies to: their ``weight`` is (out, in, ...) as a matmul's operand.
MASKED_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _is_depthwise(module):
    return isinstance(module, nn.modules.conv._ConvNd) and module.groups > 1 and module.groups == module.in_channels


def maskable_layers(model, spec):
    """[(name, module)] of the layers the spec masks, in model order."""
    out = []
    for name, module in model.named_modules():
        if not isinstance(module, MASKED_TYPES) or module.weight is None:
            continue
        if any(part in name for part in spec.exclude):
            continue
        if spec.skip_depthwise and _is_depthwise(module):
            continue
        if spec.scheduler == "semi_structured" and module.weight.shape[1] % spec.block_size:
            continue  # the input dimension does not split into whole groups (an RGB stem, a depthwise conv)
        out.append((name, module))
    return out


def _rows_along_input(weight):
    """The weight as rows whose last dimension is the input dimension (ASP's layout)."""
    if weight.dim() == 2:
        return weight
    return weight.movedim(1, -1).reshape(-1, weight.shape[1])


def _from_rows(rows, shape):
    if len(shape) == 2:
        return rows.reshape(shape)
    moved = (shape[0], *shape[2:], shape[1])
    return rows.reshape(moved).movedim(-1, 1)


def semi_structured_mask(weight, block_size=4, zeros_per_block=2):
    """Bool mask keeping, in each group of ``block_size`` weights along the input dimension,
    the ``block_size - zeros_per_block`` of largest magnitude."""
    rows = _rows_along_input(weight.detach().abs().float())
    groups = rows.reshape(-1, block_size)
    keep = torch.topk(groups, block_size - zeros_per_block, dim=1, sorted=False).indices
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(1, keep, True)
    return _from_rows(mask.reshape(rows.shape), weight.shape)


def level_mask(weight, level):
    """Bool mask zeroing round(level x numel) weights of smallest magnitude."""
    flat = weight.detach().abs().float().reshape(-1)
    zeros = int(round(level * flat.numel()))
    mask = torch.ones_like(flat, dtype=torch.bool)
    if zeros:
        mask[torch.topk(flat, zeros, largest=False, sorted=False).indices] = False
    return mask.reshape(weight.shape)


def compute_masks(layers, spec, level=None):
    """{layer name: bool mask} for ``layers`` (maskable_layers) from their current weights."""
    if spec.scheduler == "semi_structured":
        return {name: semi_structured_mask(m.weight, spec.block_size, spec.zeros_per_block) for name, m in layers}
    return {name: level_mask(m.weight, level) for name, m in layers}


@torch.no_grad()
def apply_masks(layers, masks):
    for name, module in layers:
        module.weight.mul_(masks[name].to(module.weight.device))


@torch.no_grad()
def mask_gradients(layers, masks):
    """Zero the gradients of masked weights, so momentum and Adam moments never grow there."""
    for name, module in layers:
        if module.weight.grad is not None:
            module.weight.grad.mul_(masks[name].to(module.weight.device))


def is_semi_structured(mask, block_size, zeros_per_block):
    """Whether every group of ``block_size`` along the input dimension has exactly ``zeros_per_block`` zeros."""
    if mask.dim() < 2 or mask.shape[1] % block_size:
        return False
    groups = _rows_along_input(mask).reshape(-1, block_size)
    return bool(((~groups).sum(dim=1) == zeros_per_block).all())


def mask_misfit(layers, masks, spec, level=None):
    """Why saved ``masks`` do not fit these layers and this spec (one phrase), or None."""
    names = [name for name, _ in layers]
    missing = [n for n in names if n not in masks]
    extra = [n for n in masks if n not in names]
    if missing or extra:
        which = f"no mask for layer {missing[0]!r}" if missing else f"a mask for {extra[0]!r}, which is not masked here"
        return f"{which} ({len(masks)} saved masks, {len(names)} masked layers)"
    for name, module in layers:
        mask = masks[name]
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != module.weight.shape:
            got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            return f"the mask of {name!r} is {got}, the weight {tuple(module.weight.shape)}"
        if spec.scheduler == "semi_structured" and not is_semi_structured(mask, spec.block_size, spec.zeros_per_block):
            return (f"the mask of {name!r} is not {spec.block_size - spec.zeros_per_block}:{spec.block_size} "
                    "along the input dimension")
        if level is not None:
            zeros = int((~mask).sum())
            if zeros != int(round(level * mask.numel())):
                return f"the mask of {name!r} zeroes {zeros} of {mask.numel()} weights, not level {level:g}"
    return None


def sparsity_report(layers):
    """(zeroed weights, weights, {name: zero fraction}) over ``layers``, read from the weights."""
    zeros = total = 0
    per_layer = {}
    for name, module in layers:
        z, n = int((module.weight == 0).sum()), module.weight.numel()
        per_layer[name] = z / n
        zeros, total = zeros + z, total + n
    return zeros, total, per_layer


def to_semi_structured(model, layers):
    """Swap the masked Linear weights for ``torch.sparse.to_sparse_semi_structured`` tensors
    where the device and shapes allow it (CUDA, compute capability 8.0 or newer, float16 or
    bfloat16 weights, shapes the kernels take); returns the names swapped. Convolutions stay
    dense: torch has no semi-structured convolution. Every layer that cannot be swapped keeps
    its dense, zero-filled weight, so the model computes the same either way."""
    if not torch.cuda.is_available():
        return []
    try:
        from torch.sparse import to_sparse_semi_structured
    except ImportError:  # an older torch
        return []
    swapped = []
    for name, module in layers:
        weight = module.weight
        if not isinstance(module, nn.Linear) or weight.device.type != "cuda":
            continue
        if torch.cuda.get_device_capability(weight.device) < (8, 0) or weight.dtype not in (torch.float16,
                                                                                           torch.bfloat16):
            continue
        try:
            sparse = to_sparse_semi_structured(weight.detach())
        except (RuntimeError, ValueError, NotImplementedError):
            continue  # a shape or dtype the kernels do not take
        module.weight = nn.Parameter(sparse, requires_grad=False)
        swapped.append(name)
    return swapped
