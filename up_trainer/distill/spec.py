"""The native ``distill`` section, read into plain records with every key path checked.

::

    distill:
      task_loss: true                   # keep the student's own losses (UP's mimic.task_loss)
      teachers:
        - name: teacher
          net: {type: resnet50, kwargs: {num_classes: 10}}   # the same forms as ``net``
          weight: teacher.pth           # our checkpoint, a UP-named or a torchvision state dict
          bn_mode: eval                 # eval (default) or train (BatchNorm statistics follow the batch)
      mimic:
        - name: mimic_job0
          type: base                    # UP's mimic_ins_type
          student: [head.classifier]    # student module paths whose outputs are matched
          teachers: {teacher: [head.classifier]}   # per teacher, as many paths as student has
          losses: {loss: {type: kd_loss, kwargs: {T: 4}}}   # UP's cfgs (loss slots: kinds.py)
          options: {}                   # the type's options (kinds.OPTIONS), e.g. rcnn_fpn_levels
          loss_weight: 1.0
          warm_up_iters: -1
          adapter: null                 # {kernel_size: 1}: a learned conv/linear where channels differ
      adapt:                            # UP's ADAP net parts: convs on a student part's maps, trained
        - {name: neck_adapt, on: neck, levels: [0, 1, 2, 3, 4], outplanes: 256, kernel_size: 3}

No torch import here: ``up config`` reads this before anything is built.
"""
from dataclasses import dataclass, field

from ..errors import ConfigError, did_you_mean, join_path
from .adapt_spec import read_adapt_parts
from .kinds import LOSS_SLOTS, MIMIC_TYPES, OPTIONS, REFUSED_OPTIONS

SECTION_KEYS = ("task_loss", "teachers", "mimic", "adapt")
TEACHER_KEYS = ("name", "net", "weight", "bn_mode", "parts")
JOB_KEYS = ("name", "type", "student", "teachers", "losses", "options", "loss_weight", "warm_up_iters", "adapter")
ADAPTER_KEYS = ("kernel_size", "with_relu", "channels")

# Losses a base job builds (UP's MIMIC_LOSS_REGISTRY names) and the kwargs each takes.
LOSS_KWARGS = {
    "kd_loss": ("T", "loss_weight"),
    "kl_loss": ("norm", "loss_weight"),
    "ce_loss": ("T", "loss_weight"),
    "l2_loss": ("feat_norm", "batch_mean", "loss_weight"),
    "bce_loss": ("T", "batch_mean", "loss_weight"),
}
REFUSED_LOSSES = {
    "gkd_loss": "UP's guided KD needs the labels inside the mimic loss, which mimic jobs do not pass",
}


@dataclass
class TeacherSpec:
    name: str
    net: object
    weight: object
    bn_mode: str
    path: str
    parts: object = None  # None, or the parts whose tensors must come from the weight file


@dataclass
class LossSpec:
    type: str
    kwargs: dict


@dataclass
class JobSpec:
    name: str
    type: str
    student: list
    teachers: dict  # teacher name -> list of module paths
    losses: dict  # slot (kinds.LOSS_SLOTS) -> LossSpec
    options: dict
    loss_weight: float
    warm_up_iters: int
    adapter: object  # None or {kernel_size, with_relu, channels}
    path: str


@dataclass
class DistillSpec:
    task_loss: bool
    teachers: list = field(default_factory=list)
    jobs: list = field(default_factory=list)
    adapt: list = field(default_factory=list)  # AdaptSpec (adapt_spec.py)


def _mapping(value, path, keys):
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in keys:
            raise ConfigError(join_path(path, key), "unknown key", did_you_mean(key, keys) or
                              f"known keys: {', '.join(keys)}")
    return value


def _names(value, path):
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(path, "expected a non-empty list of module paths like [head.classifier]")
    return list(value)


def _number(value, path, kind=float):
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise ConfigError(path, f"expected a number, got {type(value).__name__} {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(path, f"expected a finite number, got {value!r}")
    return value


def read_loss(entry, path, default, allowed):
    """A ``{type, kwargs}`` mimic loss for one slot; UP's rule: a loss of the slot's default
    type merges its kwargs onto the default's, another type takes only its own."""
    if entry is None:
        return LossSpec(default["type"], dict(default["kwargs"]))
    _mapping(entry, path, ("type", "kwargs"))
    kind = entry.get("type", default["type"])
    if kind in REFUSED_LOSSES:
        raise ConfigError(join_path(path, "type"), f"{kind} is not built: {REFUSED_LOSSES[kind]}",
                          f"use one of {', '.join(allowed)}")
    if kind not in LOSS_KWARGS:
        raise ConfigError(join_path(path, "type"), f"unknown mimic loss {kind!r}",
                          did_you_mean(kind, LOSS_KWARGS) or f"known: {', '.join(LOSS_KWARGS)}")
    if kind not in allowed:
        raise ConfigError(join_path(path, "type"), f"{kind} does not fit this slot", f"it takes {', '.join(allowed)}")
    kwargs = entry.get("kwargs") or {}
    _mapping(kwargs, join_path(path, "kwargs"), LOSS_KWARGS[kind])
    for key, value in kwargs.items():
        kpath = join_path(join_path(path, "kwargs"), key)
        if key in ("feat_norm", "batch_mean"):
            if not isinstance(value, bool):
                raise ConfigError(kpath, f"expected true or false, got {value!r}")
        elif key == "norm":
            if value not in ("softmax", "l2"):
                raise ConfigError(kpath, f"{value!r} is not one of softmax, l2")
        else:
            _number(value, kpath)
            if key == "T" and value <= 0:
                raise ConfigError(kpath, f"the temperature must be > 0, got {value}")
    merged = dict(default["kwargs"]) if kind == default["type"] else {}
    merged.update(kwargs)
    return LossSpec(kind, merged)


def read_options(kind, value, path):
    """The type's options over their defaults (kinds.OPTIONS), each checked."""
    known = OPTIONS[kind]
    value = value or {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
    out = {k: (list(v) if isinstance(v, list) else v) for k, v in known.items()}
    for key, v in value.items():
        kpath = join_path(path, key)
        if key in REFUSED_OPTIONS:
            raise ConfigError(kpath, f"UP's {key} is not read: {REFUSED_OPTIONS[key]}", "remove it")
        if key not in known:
            raise ConfigError(kpath, f"is not an option of {kind} mimic jobs", did_you_mean(key, known) or
                              (f"known: {', '.join(known)}" if known else f"{kind} jobs take no options"))
        if isinstance(known[key], bool):
            if not isinstance(v, bool):
                raise ConfigError(kpath, f"expected true or false, got {v!r}")
        elif isinstance(known[key], list):
            if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                            for x in v):
                raise ConfigError(kpath, f"expected a non-empty list of integers >= 0, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConfigError(kpath, f"expected an integer > 0, got {v!r}")
        out[key] = v
    for levels, strides in (("rcnn_fpn_levels", "rcnn_fpn_strides"), ("rpn_fpn_levels", "rpn_fpn_strides")):
        if levels in out and len(out[strides]) <= max(out[levels]):
            raise ConfigError(join_path(path, strides), f"{len(out[strides])} strides for levels {out[levels]}",
                              "one stride per FPN level, from level 0")
    return out


def read_adapter(value, path):
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    _mapping(value, path, ADAPTER_KEYS)
    kernel = value.get("kernel_size", 1)
    if kernel not in (1, 3):
        raise ConfigError(join_path(path, "kernel_size"), f"expected 1 or 3, got {kernel!r}")
    relu = value.get("with_relu", False)
    if not isinstance(relu, bool):
        raise ConfigError(join_path(path, "with_relu"), f"expected true or false, got {relu!r}")
    channels = value.get("channels")
    if channels is not None:
        cpath = join_path(path, "channels")
        if not isinstance(channels, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(c, int) and not isinstance(c, bool) and c > 0
                                                            for c in p) for p in channels):
            raise ConfigError(cpath, "expected a list of [student_channels, teacher_channels] pairs, one per "
                              "student module")
    return {"kernel_size": kernel, "with_relu": relu, "channels": channels}


def read_job(entry, path, index, teacher_names):
    _mapping(entry, path, JOB_KEYS)
    name = entry.get("name", f"mimic_job{index}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(join_path(path, "name"), f"{name!r} cannot name a mimic job", "use an identifier")
    kind = entry.get("type", "base")
    if kind not in MIMIC_TYPES:
        raise ConfigError(join_path(path, "type"), f"unknown mimic type {kind!r}",
                          did_you_mean(kind, MIMIC_TYPES) or f"built: {', '.join(MIMIC_TYPES)}")
    for key in ("student", "teachers"):
        if key not in entry:
            raise ConfigError(join_path(path, key), "required key is missing")
    student = _names(entry["student"], join_path(path, "student"))
    tpath = join_path(path, "teachers")
    teachers = entry["teachers"]
    if not isinstance(teachers, dict) or not teachers:
        raise ConfigError(tpath, "expected a mapping {teacher name: [module paths]}")
    for tname, names in teachers.items():
        npath = join_path(tpath, tname)
        if tname not in teacher_names:
            raise ConfigError(npath, f"no teacher is named {tname!r}", did_you_mean(tname, teacher_names) or
                              f"teachers: {', '.join(teacher_names) or 'none'}")
        _names(names, npath)
        if len(names) != len(student):
            raise ConfigError(npath, f"{len(names)} module paths for the student's {len(student)}",
                              "each student module is matched with one teacher module, in order")
    losses = entry.get("losses") or {}
    lpath = join_path(path, "losses")
    slots = LOSS_SLOTS[kind]
    _mapping(losses, lpath, tuple(slots))
    losses = {slot: read_loss(losses.get(slot), join_path(lpath, slot), default, allowed)
              for slot, (default, allowed) in slots.items()}
    options = read_options(kind, entry.get("options"), join_path(path, "options"))
    if kind == "DeFeat" and options["neck_feature_nums"] >= len(student):
        raise ConfigError(join_path(join_path(path, "options"), "neck_feature_nums"),
                          f"{options['neck_feature_nums']} neck maps leave none of the {len(student)} student "
                          "modules for the backbone loss", "list the backbone modules first, then the neck's")
    weight = _number(entry.get("loss_weight", 1.0), join_path(path, "loss_weight"))
    warm = entry.get("warm_up_iters", -1)
    if isinstance(warm, bool) or not isinstance(warm, int):
        raise ConfigError(join_path(path, "warm_up_iters"), f"expected an integer (-1: no warm-up), got {warm!r}")
    adapter = read_adapter(entry.get("adapter"), join_path(path, "adapter"))
    if adapter and adapter["channels"] is not None and len(adapter["channels"]) != len(student):
        raise ConfigError(join_path(join_path(path, "adapter"), "channels"),
                          f"{len(adapter['channels'])} pairs for {len(student)} student modules")
    return JobSpec(name, kind, student, {k: list(v) for k, v in teachers.items()}, losses, options, weight, warm,
                   adapter, path)


def read_teacher(entry, path, index):
    _mapping(entry, path, TEACHER_KEYS)
    name = entry.get("name", "teacher" if index == 0 else f"teacher{index}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(join_path(path, "name"), f"{name!r} cannot name a teacher", "use an identifier")
    if entry.get("net") is None:
        raise ConfigError(join_path(path, "net"), "required key is missing",
                          "the teacher's net, in the same form as the net section")
    weight = entry.get("weight")
    if weight is not None and (not isinstance(weight, str) or not weight):
        raise ConfigError(join_path(path, "weight"), f"expected a file path, got {weight!r}")
    bn_mode = entry.get("bn_mode", "eval")
    if bn_mode not in ("eval", "train"):
        raise ConfigError(join_path(path, "bn_mode"), f"{bn_mode!r} is not one of eval, train")
    parts = entry.get("parts")
    if parts is not None and (not isinstance(parts, list) or not parts or
                              not all(isinstance(p, str) and p for p in parts)):
        raise ConfigError(join_path(path, "parts"), f"expected a list of part names, got {parts!r}")
    return TeacherSpec(name, entry["net"], weight, bn_mode, path, parts)


def read_spec(section, path="distill"):
    """The ``distill`` section as a :class:`DistillSpec`; None when the section is absent."""
    if section is None:
        return None
    _mapping(section, path, SECTION_KEYS)
    task_loss = section.get("task_loss", True)
    if not isinstance(task_loss, bool):
        raise ConfigError(join_path(path, "task_loss"), f"expected true or false, got {task_loss!r}")
    tpath, mpath = join_path(path, "teachers"), join_path(path, "mimic")
    teachers_in, jobs_in = section.get("teachers"), section.get("mimic")
    if not isinstance(teachers_in, list) or not teachers_in:
        raise ConfigError(tpath, "expected a non-empty list of {name, net, weight} teachers")
    if not isinstance(jobs_in, list) or not jobs_in:
        raise ConfigError(mpath, "expected a non-empty list of mimic jobs")
    teachers = [read_teacher(t, join_path(tpath, i), i) for i, t in enumerate(teachers_in)]
    seen = set()
    for t in teachers:
        if t.name in seen:
            raise ConfigError(join_path(t.path, "name"), f"a second teacher is named {t.name!r}")
        seen.add(t.name)
    names = [t.name for t in teachers]
    jobs = [read_job(j, join_path(mpath, i), i, names) for i, j in enumerate(jobs_in)]
    job_names, used = set(), {}
    for job in jobs:
        if job.name in job_names:
            raise ConfigError(join_path(job.path, "name"), f"a second mimic job is named {job.name!r}")
        job_names.add(job.name)
        for tname in job.teachers:
            if tname in used:  # UP: a teacher belongs to one job; copy it under another name for a second
                raise ConfigError(join_path(join_path(job.path, "teachers"), tname),
                                  f"teacher {tname!r} is already mimicked by job {used[tname]!r}",
                                  "list the teacher again under another name for a second job")
            used[tname] = job.name
    for t in teachers:
        if t.name not in used:
            raise ConfigError(join_path(t.path, "name"), f"teacher {t.name!r} is in no mimic job",
                              "remove it, or name it in a job's teachers")
    adapt = read_adapt_parts(section.get("adapt"), join_path(path, "adapt"))
    return DistillSpec(task_loss, teachers, jobs, adapt)
