"""Knowledge distillation: teachers beside the student, mimic losses on named modules.

The ``distill`` section (native; UP's ``teacher`` + ``mimic`` + ``runtime.runner: kd`` are
translated into it by config/up_distill.py) is read by :mod:`.spec`. At build time
:func:`attach_distillation` builds and freezes the teachers and hooks the student
(:mod:`.distiller`); :class:`DistillHook` gives the distiller the iteration and records the
teachers' config digests in checkpoints. :func:`check_distill` is what ``up config`` runs: the
nets on the meta device, every module path resolved.
"""
import logging

import torch

from ..engine.hooks import Hook
from ..errors import ConfigError
from .adapt_parts import build_adapt_parts
from .distiller import Distiller, build_adapters
from .modules import ADAPTERS
from .spec import read_spec
from .teacher import build_teacher, check_teacher_net, config_digest, student_dtype

log = logging.getLogger("up")


def _refuse_unsupported(cfg):
    if cfg["runtime"].get("compile"):
        raise ConfigError("runtime.compile", "torch.compile is not combined with distillation (the teachers run "
                          "inside the student's forward hooks)", "set runtime.compile: false")


def check_distill(cfg, student):
    """``up config``: the section read, the teachers built on the meta device, every mimic name
    resolved against the built nets and the adapters sized."""
    spec = read_spec(cfg.get("distill"))
    if spec is None:
        return None
    _refuse_unsupported(cfg)
    teachers = {t.name: check_teacher_net(t) for t in spec.teachers}
    with torch.device("meta"):
        _add_adapters(student, build_adapt_parts(spec, student))  # mimic names may be in them
        build_adapters(spec, student, teachers)
        Distiller(spec, student, teachers).remove()  # resolves every module path
    return spec


class DistillHook(Hook):
    """Tells the distiller the iteration (UP's warm_up_iters counts from 0) and keeps a digest
    of each teacher's config in checkpoints (the teachers' tensors stay out of them)."""

    priority = "HIGHEST"

    def __init__(self, distiller, digests):
        super().__init__()
        self.distiller = distiller
        self.digests = digests

    def before_forward(self, trainer, iteration, batch):
        self.distiller.iteration = iteration - 1

    def state_dict(self):
        return {"teachers": dict(self.digests)}

    def load_state_dict(self, state):
        saved = (state or {}).get("teachers") or {}
        changed = sorted(n for n in self.digests if saved.get(n) not in (None, self.digests[n]))
        if changed:
            log.warning("distill: teacher(s) %s differ from the ones the checkpoint was trained with (net or "
                        "weight changed): the resumed run is not the run it continues", ", ".join(changed))


def attach_distillation(cfg, student, device, memory_format=None, resolve=lambda p: p):
    """Build the teachers and adapters and hook the (bare) student; returns the hook for the
    run's HookList, or None without a ``distill`` section. Call before the optimizer is built
    (adapters are trained) and before DDP wraps the student."""
    spec = read_spec(cfg.get("distill"))
    if spec is None:
        return None
    _refuse_unsupported(cfg)
    dtype = student_dtype(student)
    teachers = {}
    for t in spec.teachers:
        weight = resolve(t.weight) if t.weight else None
        teachers[t.name] = build_teacher(t, device=device, dtype=dtype, memory_format=memory_format,
                                         weight_path=weight)
    parts = build_adapt_parts(spec, student)
    _add_adapters(student, parts)
    adapters = build_adapters(spec, student, teachers)
    _add_adapters(student, adapters)
    if ADAPTERS in student._modules:
        student._modules[ADAPTERS].to(device=device, dtype=dtype)
    distiller = Distiller(spec, student, teachers)
    jobs = "; ".join(f"{j.name}: {j.type} ({', '.join(f'{s} {l.type}' for s, l in j.losses.items())}) on "
                     f"{', '.join(j.student)} from {', '.join(j.teachers)}" if j.type != "base" else
                     f"{j.name}: {j.losses['loss'].type} on {', '.join(j.student)} from {', '.join(j.teachers)}"
                     for j in spec.jobs)
    extra = (f"; {len(adapters)} adapter(s)" if adapters else "") + (
        f"; adapt part(s) {', '.join(parts)}" if parts else "")
    log.info("distill: %d teacher(s) (%s), frozen; %s%s", len(teachers), ", ".join(teachers), jobs, extra)
    return DistillHook(distiller, {t.name: config_digest(t) for t in spec.teachers})


def _add_adapters(student, modules):
    """Trained modules beside the student, under its ``distill_adapters`` ModuleDict."""
    if not modules:
        return
    if ADAPTERS not in student._modules:
        student.add_module(ADAPTERS, torch.nn.ModuleDict())
    student._modules[ADAPTERS].update(modules)


def drop_adapter_weights(weights, module):
    """A distilled run's weights loaded into the bare student (eval, predict, export): the
    adapters trained beside it are not part of the model."""
    if hasattr(module, ADAPTERS):
        return weights
    prefix = ADAPTERS + "."
    dropped = [k for k in weights if k.startswith(prefix)]
    if not dropped:
        return weights
    log.info("distill: %d adapter tensors of the training run left out of the student", len(dropped))
    return {k: v for k, v in weights.items() if not k.startswith(prefix)}


__all__ = ["attach_distillation", "check_distill", "drop_adapter_weights", "DistillHook", "read_spec"]
