"""Teachers: built from the same net vocabulary as the student, loaded from their weight file,
frozen (no parameter requires a gradient), in eval mode unless ``bn_mode: train``, on the
student's device, dtype and memory format."""
import hashlib
import json
import logging

import torch

from ..errors import CheckpointError, ConfigError, join_path
from ..protocols import TranslatesUpWeights
from ..weights import load_fitting, load_weights, match_prefixes

log = logging.getLogger("up")
SHOWN_KEYS = 3


def config_digest(spec):
    """sha256 of the teacher's net and weight path: what a checkpoint records instead of the
    teacher's tensors, so a resume can tell that the teacher changed."""
    text = json.dumps({"net": spec.net, "weight": spec.weight}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def build_teacher_net(spec):
    from ..tasks.net import build_model

    return build_model(spec.net, join_path(spec.path, "net"))


def load_teacher_weights(model, spec, weight_path):
    """Every tensor of the teacher must come from the file: a teacher with random parts would
    teach noise. Our checkpoints, UP-named and bare torchvision state dicts are read."""
    where = join_path(spec.path, "weight")
    try:
        weights = load_weights(weight_path)
    except CheckpointError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    weights = match_prefixes(weights, model.state_dict())
    if isinstance(model, TranslatesUpWeights):  # a UP net reads UP's parameter names too
        weights = model.translate_up_weights(weights)
    report = load_fitting(model, weights, f"teacher {spec.name} {weight_path}")
    missing = report["missing"] + report["mismatched"]
    if spec.parts is not None:  # a teacher list that stops early: only its own parts come from the file
        missing = [k for k in missing if k.split(".", 1)[0] in spec.parts]
    if missing:
        raise CheckpointError(f"{where}: {weight_path} does not fit teacher {spec.name!r}: {len(missing)} of its "
                              f"tensors are missing or shaped differently (e.g. {', '.join(missing[:SHOWN_KEYS])})")


def freeze(model, bn_mode):
    for p in model.parameters():
        p.requires_grad_(False)
    model.train(bn_mode == "train")
    return model


def build_teacher(spec, *, device, dtype, memory_format, weight_path):
    """The ready teacher module (never registered under the student: not in its parameters,
    state dict, EMA, optimizer or DDP wrapper)."""
    model = build_teacher_net(spec)
    if weight_path is None:
        log.warning("%s: no teacher weight given: teacher %s keeps its random initialization and teaches noise",
                    join_path(spec.path, "weight"), spec.name)
    else:
        load_teacher_weights(model, spec, weight_path)
    model = model.to(device=device, dtype=dtype)
    if memory_format is not None:
        model = model.to(memory_format=memory_format)
    return freeze(model, spec.bn_mode)


def student_dtype(student):
    for p in student.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def check_teacher_net(spec):
    """The teacher built on the meta device (no memory, no init compute), for ``up config``."""
    with torch.device("meta"):
        try:
            return build_teacher_net(spec)
        except (TypeError, ValueError, RuntimeError, AttributeError, KeyError, IndexError) as exc:
            raise ConfigError(join_path(spec.path, "net"), f"cannot be built from these values: "
                              f"{type(exc).__name__}: {exc}") from None
