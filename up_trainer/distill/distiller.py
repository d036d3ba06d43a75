"""Distillation as forward hooks on the student: the training loop is unchanged.

A training forward of the student (training mode, gradients on) is bracketed by two hooks on
its root module. The pre-hook keeps the batch and opens capture; forward hooks on the named
modules (student and teachers) store their outputs; the root's post-hook runs every teacher
on the same batch under ``torch.no_grad`` (inside the student's autocast, so in its
precision), computes each mimic job's losses and returns the student's output dict with them
added (``mimic.<job>.<teacher>.loss``). The trainer sums every ``*loss*`` output as always, and
logging hooks show the terms like any other loss.

What a job computes from the captured outputs is its type's (:mod:`.mimics`): the detection
types also read the batch's boxes, the RPN's proposals or objectness (first element of those
modules' outputs, hooked on both nets) and the adapt parts' maps (``distill.adapt``: run on
their student part's output inside the same forward); the losses are named
``mimic.<job>.<teacher>.<slot>``.

Evaluation forwards (eval mode or no grad) pass untouched, and so does a recomputation under
memory checkpointing (capture is closed by then). Adapters (a learned 1x1 conv or linear
where a student output's channels differ from the teacher's) are registered on the student as
``distill_adapters``: the optimizer, DDP, AMP and checkpoints see them as student
parameters; ``up eval``/``predict``/``export`` build the bare student and drop those keys.
"""
import torch
from torch import nn

from ..errors import ConfigError, join_path
from .adapt_parts import part_maps
from .kinds import NEEDS
from .losses import build_loss
from .mimics import COMPUTE, Seen
from .modules import ADAPTERS, find_module, out_channels


def _adapter_key(job, teacher, index):
    return f"{job}__{teacher}__{index}"


class Adapter(nn.Module):
    """Maps student channels onto teacher channels: a conv over dim 1 for maps, a linear for
    N x C outputs."""

    def __init__(self, cin, cout, kernel_size=1, with_relu=False):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size, padding=kernel_size // 2)
        self.relu = with_relu

    def forward(self, x):
        if x.dim() == 2:  # a 1x1 conv over channels is this linear map (kernel_size 1 only: checked by the caller)
            y = nn.functional.linear(x, self.conv.weight.flatten(1), self.conv.bias)
        else:
            y = self.conv(x)
        return torch.relu(y) if self.relu else y


def build_adapters(spec, student, teachers):
    """{key: Adapter} for every (job, teacher, student module) whose channels differ."""
    adapters = {}
    for job in spec.jobs:
        if job.adapter is None:
            continue
        for tname, tnames in job.teachers.items():
            for i, (sname, tname_mod) in enumerate(zip(job.student, tnames)):
                pair = job.adapter["channels"][i] if job.adapter["channels"] else None
                if pair is None:
                    cs = out_channels(find_module(student, sname, join_path(join_path(job.path, "student"), i),
                                                  "student"))
                    ct = out_channels(find_module(teachers[tname], tname_mod, join_path(join_path(
                        job.path, "teachers"), tname), f"teacher {tname}"))
                    if cs is None or ct is None:
                        raise ConfigError(join_path(job.path, "adapter"), f"the channels of {sname} or {tname_mod} "
                                          "cannot be read from the modules", "give adapter.channels: [[student, "
                                          "teacher], ...], one pair per student module")
                    pair = (cs, ct)
                if pair[0] != pair[1]:
                    adapters[_adapter_key(job.name, tname, i)] = Adapter(
                        pair[0], pair[1], job.adapter["kernel_size"], job.adapter["with_relu"])
    return adapters


class Distiller:
    """The hooks that make a student's training forward return mimic losses too. Holds the
    teachers outside the student module tree."""

    def __init__(self, spec, student, teachers):
        self.spec = spec
        self.student = student
        self.teachers = teachers  # name -> frozen module (not a submodule of the student)
        self.losses = {job.name: {slot: build_loss(loss) for slot, loss in job.losses.items()} for job in spec.jobs}
        self.iteration = 0  # 0-based training iteration, set before each forward (warm_up_iters)
        self._capturing = False
        self._batch = None
        self._student_out = {}
        self._teacher_out = {name: {} for name in teachers}
        self._student_extra, self._teacher_extra = {}, {name: {} for name in teachers}
        self._adapt_out = {}
        self._handles = []
        self._hook_modules()

    # -- hooks ------------------------------------------------------------------------------
    def _capture(self, store, name):
        def hook(module, args, output):
            if self._capturing:
                store[name] = output
        return hook

    def _hook_modules(self):
        hooked = set()  # (net, module path): one capture hook each, however many jobs read it
        for job in self.spec.jobs:
            for i, name in enumerate(job.student):
                module = find_module(self.student, name, join_path(join_path(job.path, "student"), i), "student")
                if ("", name) not in hooked:
                    hooked.add(("", name))
                    self._handles.append(module.register_forward_hook(self._capture(self._student_out, name)))
            for tname, names in job.teachers.items():
                for name in names:
                    module = find_module(self.teachers[tname], name,
                                         join_path(join_path(job.path, "teachers"), tname), f"teacher {tname}")
                    if (tname, name) not in hooked:
                        hooked.add((tname, name))
                        self._handles.append(module.register_forward_hook(
                            self._capture(self._teacher_out[tname], name)))
        self._hook_extras()
        self._hook_adapt_parts()
        student = self.student

        def open_capture(module, args):
            if module is student and module.training and torch.is_grad_enabled():
                self._capturing = True
                self._batch = args[0] if args else None

        def add_losses(module, args, output):
            if module is not student or not self._capturing:
                return None
            try:
                return self._with_mimic_losses(output)
            finally:
                self._capturing = False
                self._batch = None
                self._student_out.clear()
                self._student_extra.clear()
                self._adapt_out.clear()
                for store in (*self._teacher_out.values(), *self._teacher_extra.values()):
                    store.clear()

        self._handles.append(student.register_forward_pre_hook(open_capture))
        self._handles.append(student.register_forward_hook(add_losses))

    def _hook_extras(self):
        """The outputs a job type reads beyond the named modules (kinds.NEEDS): the first
        element of the module's output (the proposals, the objectness logits)."""
        def capture_first(store, what):
            def hook(module, args, output):
                if self._capturing:
                    store[what] = output[0]
            return hook

        hooked = set()
        for job in self.spec.jobs:
            for what, (path, gives) in NEEDS[job.type].items():
                nets = [("student", self.student, self._student_extra, join_path(job.path, "student"))]
                nets += [(f"teacher {t}", self.teachers[t], self._teacher_extra[t],
                          join_path(join_path(job.path, "teachers"), t)) for t in job.teachers]
                for whose, net, store, where in nets:
                    try:
                        module = find_module(net, path, where, whose)
                    except ConfigError as exc:
                        raise ConfigError(where, f"{job.type} mimic reads {gives} from {path}: {exc.message}",
                                          exc.hint) from None
                    if (whose, what) not in hooked:
                        hooked.add((whose, what))
                        self._handles.append(module.register_forward_hook(capture_first(store, what)))

    def _hook_adapt_parts(self):
        """Each adapt part runs on its student part's maps in a training forward."""
        adapters = getattr(self.student, ADAPTERS, None)
        for adapt in self.spec.adapt:
            source = find_module(self.student, adapt.on, join_path(adapt.path, "on"), "student")

            def run(module, args, output, adapt=adapt):
                if self._capturing:
                    self._adapt_out[adapt.out_name] = adapters[adapt.name](part_maps(output))
            self._handles.append(source.register_forward_hook(run))

    def remove(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- losses -----------------------------------------------------------------------------
    def _run_teachers(self):
        with torch.no_grad():
            for teacher in self.teachers.values():
                teacher(self._batch)

    def _with_mimic_losses(self, output):
        if not isinstance(output, dict):
            raise TypeError(f"distillation needs the student to return a dict of outputs, got {type(output).__name__}")
        self._run_teachers()
        out = dict(output)
        if not self.spec.task_loss:  # UP's task_loss: false: only the mimic losses train the student
            out = {k: (v.detach() if "loss" in k and isinstance(v, torch.Tensor) else v) for k, v in out.items()}
        adapters = getattr(self.student, ADAPTERS, None)
        boxes = [t["boxes"] for t in self._batch["target"]] \
            if isinstance(self._batch, dict) and self._batch.get("target") is not None else None
        for job in self.spec.jobs:
            for tname, tnames in job.teachers.items():
                self._check_captured(job, tname)
                feats_s = []
                for i, name in enumerate(job.student):
                    key = _adapter_key(job.name, tname, i)
                    feat = self._student_out[name]
                    if adapters is not None and key in adapters:
                        if feat.dim() != 4 and job.adapter["kernel_size"] != 1:
                            raise ConfigError(join_path(join_path(job.path, "adapter"), "kernel_size"),
                                              f"a {job.adapter['kernel_size']}x{job.adapter['kernel_size']} adapter "
                                              f"needs N x C x H x W outputs; {name} gives {tuple(feat.shape)}",
                                              "kernel_size: 1")
                        feat = adapters[key](feat)
                    feats_s.append(feat)
                feats_t = [self._teacher_out[tname][name] for name in tnames]
                self._check_shapes(job, tname, feats_s, feats_t)
                if job.type == "DeFeat" and boxes is None:
                    raise ConfigError(job.path, "DeFeat mimic needs the ground-truth boxes of the batch",
                                      "a detection student trained on boxes")
                seen = Seen(boxes, self._student_extra, self._teacher_extra[tname], self._adapt_out)
                for slot, loss in COMPUTE[job.type](job, self.losses[job.name], feats_s, feats_t, seen).items():
                    out[f"mimic.{job.name}.{tname}.{slot}"] = loss * self._weight(job)
        return out

    def _check_captured(self, job, tname):
        """Every named module ran in this forward (a module off the forward path, or one
        replaced after it was hooked, such as a BatchNorm by sync_bn, gives nothing)."""
        for side, names, store, where in (("student", job.student, self._student_out, "student"),
                                          (f"teacher {tname}", job.teachers[tname], self._teacher_out[tname],
                                           f"teachers.{tname}")):
            for name in names:
                if name not in store:
                    raise ConfigError(join_path(job.path, where), f"the {side} module {name} did not run in its "
                                      "forward", "name a module on the forward path (not a loss or "
                                      "post-process part, nor a BatchNorm under runtime.sync_bn)")
        for what, (path, gives) in NEEDS[job.type].items():
            for side, store, where in (("student", self._student_extra, "student"),
                                       (f"teacher {tname}", self._teacher_extra[tname], f"teachers.{tname}")):
                if what not in store:
                    raise ConfigError(join_path(job.path, where), f"{job.type} mimic reads {gives} from the {side}'s "
                                      f"{path}, which did not run in its forward", "a two-stage (RPN) detector")

    def _check_shapes(self, job, tname, feats_s, feats_t):
        """Outputs compared element by element must agree in shape (the adapter fixes channels
        only): one line naming both modules, at the first training step (``--dry-run`` shows it)."""
        for i, (s, t) in enumerate(zip(feats_s, feats_t)):
            if not isinstance(s, torch.Tensor) or not isinstance(t, torch.Tensor):
                raise ConfigError(join_path(join_path(job.path, "student"), i), f"{job.student[i]} or "
                                  f"{job.teachers[tname][i]} does not output one tensor", "name a layer module")
            if s.shape != t.shape:
                hint = ("add adapter: true (a learned 1x1 conv to the teacher's channels)"
                        if s.shape[2:] == t.shape[2:] and s.shape[:1] == t.shape[:1] and job.adapter is None else
                        "name modules whose outputs have the same size")
                raise ConfigError(join_path(join_path(job.path, "student"), i),
                                  f"student {job.student[i]} outputs {tuple(s.shape)}, teacher {tname} "
                                  f"{job.teachers[tname][i]} outputs {tuple(t.shape)}", hint)

    def _weight(self, job):
        """UP's loss_post_process: loss_weight, ramped linearly over the first warm_up_iters."""
        if job.warm_up_iters > self.iteration:
            return job.loss_weight * (self.iteration / job.warm_up_iters)
        return job.loss_weight
