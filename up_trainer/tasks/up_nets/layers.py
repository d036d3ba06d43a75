"""UP's ``normalize`` and ``initializer`` options as torch layers and init functions."""
from functools import partial

from torch import nn

from ...errors import ConfigError
from .options import Options, sub_options

NORMS = ("solo_bn", "freeze_bn", "caffe_freeze_bn", "sync_bn", "pt_sync_bn", "link_sync_bn", "gn", "task_sync_bn")
NORMS += ("mqbench_freeze_bn",)  # MQBench's FrozenBatchNorm2d (UP's quant files): statistics and affine fixed


class StatsFrozenBatchNorm2d(nn.BatchNorm2d):
    """UP's ``freeze_bn``: a BatchNorm that always normalises with its running statistics
    (eval mode even while the model trains) but whose affine weight and bias still learn."""

    def train(self, mode=True):
        return super().train(False)


def norm_layer(opts, default="solo_bn"):
    """(norm factory taking a channel count, sync-BN group size or None) for the ``normalize``
    kwarg of a UP part. sync_bn trains as BatchNorm2d on one process and is converted to
    torch SyncBatchNorm (within groups of ``group_size`` processes) when distributed."""
    kind, kw = sub_options(opts, "normalize", "normalize", default={"type": default})
    if kind == "msbench_freeze_bn":  # MSBench's FrozenBatchNorm2d (UP's sparse files): eval-mode statistics,
        kind = "freeze_bn"  # affine weights still learning, which is freeze_bn here
    if kind not in NORMS:
        raise ConfigError(opts.at("normalize.type"), f"UP norm {kind!r} is not mapped",
                          f"supported: {', '.join(NORMS)}")
    sync_group = None
    if kind == "gn":
        groups = kw.take("num_groups", types=int)
        kw.done()
        return partial(nn.GroupNorm, groups), None
    if kind == "task_sync_bn":  # UP's multitask norm: running statistics per task (tasks/up_nets/task_norm.py)
        from .task_norm import read_task_norm

        return read_task_norm(kw), None
    if kind == "caffe_freeze_bn":
        from torchvision.ops.misc import FrozenBatchNorm2d

        kw.done()
        return partial(FrozenBatchNorm2d, eps=0.0), None  # UP's caffe variant has no eps
    if kind == "mqbench_freeze_bn":
        from torchvision.ops.misc import FrozenBatchNorm2d

        kw.done()
        return FrozenBatchNorm2d, None  # eps 1e-5, as MQBench's
    bn_kwargs = {}
    for key in ("eps", "momentum"):
        value = kw.take(key, None, types=(float, type(None)))
        if value is not None:
            bn_kwargs[key] = value
    if kind in ("sync_bn", "pt_sync_bn", "link_sync_bn"):
        sync_group = kw.take("group_size", 0, types=int, check=lambda v: None if v >= 0 else "must be >= 0")
        kw.ignore("var_mode", "statistics are exact in torch SyncBatchNorm")
        sync_group = sync_group or 0
    kw.done()
    cls = StatsFrozenBatchNorm2d if kind == "freeze_bn" else nn.BatchNorm2d
    return (partial(cls, **bn_kwargs) if bn_kwargs else cls), sync_group


INIT_METHODS = ("msra", "xavier", "normal")


def read_initializer(opts, default=None):
    """The ``initializer: {method, ...}`` option as (method, std) or None (keep torchvision's)."""
    value = opts.take("initializer", default, types=(dict, type(None)))
    if value is None:
        return None
    path = opts.at("initializer")
    init = Options(value, path, "initializer")
    method = init.take("method", types=str)
    if method not in INIT_METHODS:
        raise ConfigError(f"{path}.method", f"UP initializer {method!r} is not mapped",
                          f"supported: {', '.join(INIT_METHODS)}")
    std = init.take("std", 0.01, types=float) if method == "normal" else None
    init.done()
    return method, std


def initialize(module, init):
    """UP's initializers: norms to (1, 0); conv/linear weights msra (kaiming normal, a=1),
    xavier (normal) or normal(std); biases to zero."""
    if init is None:
        return
    method, std = init
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight), nn.init.zeros_(m.bias)
        if isinstance(m, (nn.Conv2d, nn.Linear, nn.ConvTranspose2d)):
            if method == "msra":
                nn.init.kaiming_normal_(m.weight, a=1)
            elif method == "xavier":
                nn.init.xavier_normal_(m.weight)
            else:
                nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
