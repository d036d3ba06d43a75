"""Running candidates under torch.utils.checkpoint, and putting their forward back.

Each candidate's ``forward`` is replaced by an instance attribute (removed again by
:func:`uninstall`, so the class forward shows through as before). Checkpointing only applies
in training mode with grad enabled: evaluation runs the original code.

BatchNorm pitfall: recomputation runs the forward a second time in training mode, which would
update running_mean / running_var / num_batches_tracked twice. The recompute context saves
every buffer of the candidate before the recomputation and copies it back afterwards, so the
buffers end exactly as after one forward (the normalisation itself uses batch statistics, so
the recomputed activations are unchanged). RNG state is preserved by checkpoint itself
(preserve_rng_state=True) so dropout masks match.
"""
import inspect
import logging
import time
import types

import torch
from torch.utils.checkpoint import checkpoint

from . import profiler

log = logging.getLogger("up")

# Keep checkpoint's legacy handling of surrounding saved_tensors_hooks (our measurement
# hooks) without its FutureWarning, where this torch knows the argument.
_EXTRA = {"respect_saved_tensors_hooks": False} \
    if "respect_saved_tensors_hooks" in inspect.signature(checkpoint).parameters else {}


class Controller:
    """State shared by the wrappers and the hook: what to checkpoint this forward."""

    def __init__(self, root, candidates):
        self.root = root
        self.candidates = candidates
        self.active = frozenset()  # units to checkpoint
        self.excluded = {}  # name -> reason, found at run time
        self.recorder = None  # a profiler.Recorder measuring the next forward (detail: profiling)
        self.dry_run = False
        self.calls = {}
        self.recompute_seconds = 0.0  # process CPU time spent recomputing (host time on CUDA)
        self.recompute_calls = 0
        self.checkpointed_calls = 0

    @property
    def units(self):
        return [u for c in self.candidates if c.name not in self.excluded for u in c.units]


class _KeepBuffers:
    """Recompute context: buffers (BN running stats) are put back as they were before."""

    def __init__(self, buffers, ctrl):
        self.buffers, self.ctrl = buffers, ctrl

    def __enter__(self):
        self.saved = [b.clone() for b in self.buffers]
        self.t0 = time.process_time()

    def __exit__(self, *exc):
        with torch.no_grad():
            for b, s in zip(self.buffers, self.saved):
                b.copy_(s)
        self.saved = None
        self.ctrl.recompute_seconds += time.process_time() - self.t0
        self.ctrl.recompute_calls += 1
        return False


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _versions(args, kwargs):
    return [(t, t._version) for t in profiler.tensors_in((args, kwargs))]


def _checkpoint_forward(self, *args, **kwargs):
    # A bound method stored on the instance (not a closure) so that copy.deepcopy of the model
    # (EMA, SWA) rebinds it to the copy instead of running the original module.
    ctrl, cand = self._memckpt
    orig = type(self).forward.__get__(self)
    if ctrl.dry_run:
        before = _versions(args, kwargs)
        out = orig(*args, **kwargs)
        if any(t._version != v for t, v in before):
            ctrl.excluded[cand.name] = "modifies an input in place (seen in the dry run)"
        return out
    if not (torch.is_grad_enabled() and self.training) or cand.name in ctrl.excluded:
        return orig(*args, **kwargs)
    k = ctrl.calls.get(cand.name, 0)
    ctrl.calls[cand.name] = k + 1
    unit = cand.unit(k)
    if ctrl.recorder is not None and ctrl.recorder.detail:  # profiling: run plainly, attribute
        return ctrl.recorder.run_unit(unit, orig, args, kwargs)
    if unit not in ctrl.active:
        return orig(*args, **kwargs)
    buffers = list(self.buffers())
    before = _versions(args, kwargs)
    out = checkpoint(orig, *args, use_reentrant=False, preserve_rng_state=True,
                     context_fn=lambda: (_Null(), _KeepBuffers(buffers, ctrl)), **_EXTRA, **kwargs)
    ctrl.checkpointed_calls += 1
    rec = profiler.current()
    if rec is not None:
        rec.held(args, kwargs)
    if any(t._version != v for t, v in before):
        # Too late for this step's gradients of this module; never checkpoint it again.
        ctrl.excluded[cand.name] = "modified an input in place while checkpointed"
        log.warning("memory_checkpoint: %s modified its input in place; excluded from now on", cand.name)
    return out


def _root_forward(self, *args, **kwargs):
    ctrl = self._memckpt_root
    orig = type(self).forward.__get__(self)
    ctrl.calls = {}  # share_weight_num call indices count per forward
    if ctrl.recorder is not None and torch.is_grad_enabled():
        with profiler.recording(ctrl.recorder):
            return orig(*args, **kwargs)
    return orig(*args, **kwargs)


def install(ctrl):
    """Wrap every candidate's forward and the root's (per-forward bookkeeping)."""
    for mod in [c.module for c in ctrl.candidates] + [ctrl.root]:
        if "forward" in mod.__dict__:
            raise RuntimeError(f"{type(mod).__name__}.forward is already patched on this instance "
                               "(two memory_checkpoint hooks?)")
    for cand in ctrl.candidates:
        cand.module._memckpt = (ctrl, cand)
        cand.module.forward = types.MethodType(_checkpoint_forward, cand.module)
    ctrl.root._memckpt_root = ctrl
    ctrl.root.forward = types.MethodType(_root_forward, ctrl.root)


def uninstall(ctrl):
    for mod in [c.module for c in ctrl.candidates] + [ctrl.root]:
        for attr in ("forward", "_memckpt", "_memckpt_root"):
            mod.__dict__.pop(attr, None)


def dry_run(ctrl, batch):
    """One no-grad forward that records which candidates modify an input in place.

    Buffers and RNG are restored afterwards, so training continues exactly as without it.
    """
    root = ctrl.root
    buffers = [b.detach().clone() for b in root.buffers()]
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    ctrl.dry_run = True
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            root(batch)
    finally:
        ctrl.dry_run = False
        with torch.no_grad():
            for b, s in zip(root.buffers(), buffers):
                b.copy_(s)
    return dict(ctrl.excluded)
