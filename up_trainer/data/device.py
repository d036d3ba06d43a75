"""Moving a batch (nested dicts, lists, tuples of tensors) to the device: shared by the loader and
the model-input step, which the loader itself imports."""
import torch


def to_device(obj, device, non_blocking=False, memory_format=None):
    """Tensors in ``obj`` (nested dicts, lists, tuples) on ``device``; with ``memory_format``
    4-D floating tensors (image batches) are laid out in it."""
    if isinstance(obj, torch.Tensor):
        if memory_format is not None and obj.dim() == 4 and obj.is_floating_point():
            return obj.to(device, non_blocking=non_blocking, memory_format=memory_format)
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, dict):
        return {k: to_device(v, device, non_blocking, memory_format) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device, non_blocking, memory_format) for v in obj)
    return obj
