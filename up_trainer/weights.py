"""Weights from files: read a state dict from any checkpoint-like file, and load what fits.

Every pretrained path (``saver.pretrain_model``, a classifier's or detector's ``pretrained``)
goes through :func:`load_fitting`: tensors whose name and shape fit are loaded, the rest is
reported (one info line, one warning per kind of misfit), never an error.
"""
import logging
import pickle
import warnings

import torch

from .errors import CheckpointError
from .integrity import verify_checksums
from .paths import open_input

log = logging.getLogger("up")
SHOWN_KEYS = 20  # per warning line; the report returned holds them all


# torch's legacy (pre-zip) files start with this number, pickled (LONG1 opcode, 10 bytes)
_LEGACY_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def torch_load(f, map_location="cpu"):
    """``torch.load(weights_only=True)`` of a binary file opened by ``paths.open_input``.

    A file torch.save did not write (a plain pickle, whose load could run code; text; an
    image) is refused before it is unpickled, with a ValueError. torch's warnings (a legacy
    file's pickle protocol) stay off stderr, and the weights-only unpickler's refusal is
    raised as its own reason in one line, not torch's advice to load unsafely."""
    f.seek(0)
    head = f.read(64)
    f.seek(0)
    if not head.startswith(b"PK\x03\x04") and _LEGACY_MAGIC not in head:
        raise ValueError("not a file torch.save writes (a plain pickle is refused: loading one can run code)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(f, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise pickle.UnpicklingError(_unpickler_reason(str(exc))) from None


def _unpickler_reason(text):
    """The line of torch's weights-only message that says what was refused."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if "WeightsUnpickler error:" in line:
            reason = line.split("WeightsUnpickler error:", 1)[1].strip() or (lines[i + 1] if i + 1 < len(lines) else "")
            return reason.split(". Please use", 1)[0]
    return lines[0] if lines else "refused"


def load_weights(path):
    """State dict from any checkpoint-like file: ours, a {'state_dict': ...} file, or a bare one.
    Opened by the one input opener (paths.open_input): a regular file or an error line."""
    with open_input(path, "weights file", CheckpointError) as f:
        bad = verify_checksums(f)
        if bad:
            raise CheckpointError(f"weights file {path} is corrupt: {bad}")
        try:
            obj = torch_load(f)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(f"cannot load weights from {path}: {first}") from None
    if isinstance(obj, dict):
        for key in ("model", "state_dict", "model_state_dict"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path} does not hold a state dict of tensors")
    return obj


def load_fitting(module, state, source, scope=None, adapt=None):
    """Load the tensors of ``state`` that ``module`` has under the same name and shape.

    ``scope``: the model keys expected from this file (default: all), for the "missing" count.
    ``adapt(key, value, wanted_shape)`` may return a reshaped tensor for a shape that differs
    (a stem with another channel count), or None to leave it mismatched.
    Returns ``{loaded, missing, unexpected, mismatched}``: loaded keys; model keys in scope the
    file lacks; file keys the model lacks; "key (file shape) vs (model shape)" strings.
    """
    own = module.state_dict()
    loaded, mismatched, unexpected = {}, [], []
    for key, value in state.items():
        if key not in own:
            unexpected.append(key)
            continue
        want = own[key].shape
        if value.shape != want and adapt is not None:
            adapted = adapt(key, value, want)
            value = value if adapted is None else adapted
        if value.shape != want:
            mismatched.append(f"{key} {tuple(value.shape)} vs {tuple(want)}")
            continue
        loaded[key] = value
    scope = list(own) if scope is None else list(scope)
    missing = [k for k in scope if k not in state]
    module.load_state_dict(loaded, strict=False)
    log.info("%s: loaded %d/%d tensors", source, sum(k in loaded for k in scope), len(scope))
    for title, keys in (("missing", missing), ("unexpected", unexpected), ("shape-mismatched", mismatched)):
        if keys:
            log.warning("%s: %d %s keys: %s", source, len(keys), title, ", ".join(keys[:SHOWN_KEYS]) +
                        (" ..." if len(keys) > SHOWN_KEYS else ""))
    return {"loaded": sorted(loaded), "missing": missing, "unexpected": unexpected, "mismatched": mismatched}


def match_prefixes(weights, own):
    """Key names as the model has them: DDP's ``module.`` dropped, and a bare torchvision
    state dict placed under the wrapper's ``backbone.`` when that is where its keys fit."""
    weights = {k[len("module."):] if k.startswith("module.") else k: v for k, v in weights.items()}
    direct = sum(k in own for k in weights)
    nested = sum(f"backbone.{k}" in own for k in weights)
    if nested > direct:
        weights = {f"backbone.{k}": v for k, v in weights.items()}
    return weights


def under_backbone(state, own):
    """An ImageNet classifier's tensors named as a detector's ``backbone.`` holds them
    (``conv1.weight`` -> ``backbone.conv1.weight``); a MobileNet's ``features.`` level is dropped
    when the detector's body is those blocks themselves (whichever names fit more of ``own``)."""
    state = {k if k.startswith("backbone.") else "backbone." + k: v for k, v in state.items()}
    flat = {("backbone." + k[len("backbone.features."):] if k.startswith("backbone.features.") else k): v
            for k, v in state.items()}
    return flat if sum(k in own for k in flat) > sum(k in own for k in state) else state
