"""Weight sparsity: masks on the weights of linear and convolution layers, kept through training.

The ``sparsity`` section (native; UP's ``runtime.runner: sparse`` + ``sparsity`` translate into
it, config/up_sparse.py) is read by :mod:`.spec`; the masks are computed and checked in
:mod:`.masks`; the sparsity hook (:mod:`.hook`) applies them during training and keeps them
in checkpoints. :func:`check_sparsity` is what ``up config`` runs on the net built on the meta
device. No torch import at package level: ``up config`` reads the spec first.
"""
from ..errors import ConfigError
from .spec import SparsitySpec, read_sparsity, spec_of  # noqa: F401


def _refuse_conflicts(cfg):
    hooks = cfg.get("hooks") or []
    if any(isinstance(h, dict) and h.get("type") == "ema" for h in hooks):
        raise ConfigError("sparsity", "an ema hook averages the weights before the masks zeroed them, so the "
                          "weights it evaluates and saves are not sparse", "remove ema (UP's sparse runner "
                          "ignores it too)")


def check_sparsity(cfg, model):
    """``up config``: the section read and at least one layer of the built net masked."""
    spec = spec_of(cfg)
    if spec is None:
        return None
    from .masks import maskable_layers

    _refuse_conflicts(cfg)
    if not maskable_layers(model, spec):
        raise ConfigError("sparsity", f"no layer of this net is masked ({spec.describe()}): no linear or "
                          "convolution layer fits", "check sparsity.exclude and block_size")
    return spec


def attach_sparsity(cfg, model, hooks):
    """Add the sparsity hook of ``model`` (bare, before any DDP wrapper) to ``hooks`` (the run's
    HookList) when the config has a section."""
    spec = check_sparsity(cfg, model)
    if spec is None:
        return None
    from .hook import SparsityHook

    return hooks.add(SparsityHook(spec, model), name="sparsity", type_name="sparsity")
