"""UP's distillation keys, translated into the native ``distill`` section.

UP's ``kd`` runner (``runtime.runner: {type: kd}``) builds one teacher per top-level key whose
name contains ``teacher`` (a net list like ``net``) and reads ``mimic``: one job, or with
``mimic_as_jobs: true`` one job per ``mimic_job*`` key. A job holds ``mimic_ins_type``
(default base), ``loss_weight``, ``warm_up_iters``, ``cfgs`` (its losses and options),
``student: {mimic_name}`` and one ``<teacher key>: {mimic_name, teacher_weight,
teacher_bn_mode}`` per teacher it mimics. UP's base runner ignores all of this, and so do we
then, saying so. UP's ``ADAP`` entries of the student's net list (convs trained beside the
student for FRS and DeFeat) become ``distill.adapt`` parts; a teacher list that stops early
(backbone + FPN + NaiveRPN) is completed with the student's later entries, whose weights it
does not need. No torch import here.
"""
from ..errors import ConfigError, did_you_mean, join_path
from .up_sparse import translate_sparse

JOB_KEYS = ("mimic_ins_type", "loss_weight", "warm_up_iters", "cfgs", "student")
TEACHER_KEYS = ("mimic_name", "teacher_weight", "teacher_bn_mode")
# UP's cls nets end in base_cls_postprocess; a teacher list stops at its head (it never
# trains). The post-process our cls net needs is added, with a plain cross-entropy it never uses.
CLS_HEADS = ("base_cls_head", "vit_head")
ADAP_KWARGS = ("inplanes", "outplanes", "out_layers", "kernel_size", "with_relu", "do_init_weights", "out_name")
CLS_POST = {"name": "post_process", "type": "base_cls_postprocess", "kwargs": {"cls_loss": {"type": "ce"}}}


def _teacher_keys(cfg):
    return [k for k in cfg if isinstance(k, str) and "teacher" in k]


def _runner_type(cfg):
    runtime = cfg.get("runtime")
    runner = runtime.get("runner") if isinstance(runtime, dict) else None
    if runner is None:
        return None
    if isinstance(runner, dict):
        return runner.get("type")
    return runner


def _jobs(mimic):
    """{job name: job mapping} as UP's prepare_mimic_configs reads them."""
    if not isinstance(mimic, dict):
        raise ConfigError("mimic", f"expected a mapping, got {type(mimic).__name__}")
    mimic = dict(mimic)
    mimic.pop("task_loss", None)
    if "mimic_as_jobs" in mimic:
        if mimic.pop("mimic_as_jobs") is not True:
            raise ConfigError("mimic.mimic_as_jobs", "must be true or absent (UP)")
        for key in mimic:
            if "mimic_job" not in key:
                raise ConfigError(join_path("mimic", key), "under mimic_as_jobs every key names a job",
                                  "call it mimic_job<N> (UP)")
        return mimic, "mimic."
    if "student" not in mimic:
        raise ConfigError("mimic.student", "required key is missing", "a single mimic job names the student's "
                          "modules (mimic_name); several jobs need mimic_as_jobs: true")
    return {"mimic_job0": mimic}, "mimic"


def _teacher_net(net, notes, key):
    if isinstance(net, list) and len(net) == 2 and all(isinstance(e, dict) for e in net) \
            and net[1].get("type") in CLS_HEADS:
        notes.append(f"{key}: the UP classifier teacher (backbone + head) gets a base_cls_postprocess it never "
                     "trains with (our classifier net has one)")
        return [*net, dict(CLS_POST)]
    return net


def _job(name, job, path, teacher_nets):
    if not isinstance(job, dict):
        raise ConfigError(path, f"expected a mapping, got {type(job).__name__}")
    teachers, out = {}, {"name": name}
    for key, value in job.items():
        kpath = join_path(path, key)
        if "teacher" in key:
            if key not in teacher_nets:
                raise ConfigError(kpath, f"no top-level {key} net is defined",
                                  did_you_mean(key, list(teacher_nets)) or "define it beside net")
            if not isinstance(value, dict):
                raise ConfigError(kpath, f"expected a mapping {{mimic_name, teacher_weight}}, got {type(value).__name__}")
            for tkey in value:
                if tkey not in TEACHER_KEYS:
                    raise ConfigError(join_path(kpath, tkey), "is not read by UP's kd runner",
                                      did_you_mean(tkey, TEACHER_KEYS) or f"known: {', '.join(TEACHER_KEYS)}")
            teachers[key] = value
        elif key not in JOB_KEYS:
            raise ConfigError(kpath, "is not read by UP's kd runner",
                              did_you_mean(key, JOB_KEYS) or f"known: {', '.join(JOB_KEYS)}, <teacher key>")
    if not teachers:
        raise ConfigError(path, "the mimic job names no teacher", "add <teacher key>: {mimic_name: [...]}")
    student = job.get("student")
    if not isinstance(student, dict) or set(student) - {"mimic_name"}:
        raise ConfigError(join_path(path, "student"), "expected {mimic_name: [module paths]}")
    out["type"] = job.get("mimic_ins_type", "base")
    out["student"] = student.get("mimic_name")
    out["teachers"] = {k: v.get("mimic_name") for k, v in teachers.items()}
    for key in ("loss_weight", "warm_up_iters"):
        if key in job:
            out[key] = job[key]
    cfgs = job.get("cfgs") or {}
    if not isinstance(cfgs, dict):
        raise ConfigError(join_path(path, "cfgs"), f"expected a mapping, got {type(cfgs).__name__}")
    if out["type"] == "base":
        for key in cfgs:
            if key != "loss":
                raise ConfigError(join_path(join_path(path, "cfgs"), key), "is not read by UP's base mimic job",
                                  "base jobs read cfgs.loss only")
    # UP's loss slots are named loss / *_loss (distill/kinds.py); the other cfgs are the type's options
    out["losses"] = {k: v for k, v in cfgs.items() if k == "loss" or str(k).endswith("_loss")}
    options = {k: v for k, v in cfgs.items() if k not in out["losses"]}
    if options:
        out["options"] = options
    return out, teachers


def _adapt_parts(net, notes):
    """UP's ADAP entries taken out of the student's net list, as ``distill.adapt`` parts."""
    if not isinstance(net, list):
        return []
    parts = []
    for i, entry in enumerate(list(net)):
        if not isinstance(entry, dict) or entry.get("type") != "ADAP":
            continue
        path = join_path("net", i)
        kwargs = entry.get("kwargs") or {}
        for key in kwargs:
            if key not in ADAP_KWARGS:
                raise ConfigError(join_path(join_path(path, "kwargs"), key), "is not read by UP's ADAP",
                                  did_you_mean(key, ADAP_KWARGS) or f"known: {', '.join(ADAP_KWARGS)}")
        on = entry.get("prev") or (net[i - 1].get("name") if i and isinstance(net[i - 1], dict) else None)
        part = {"name": entry.get("name"), "on": on, "levels": kwargs.get("out_layers", [0, 1, 2, 3, 4]),
                "outplanes": kwargs.get("outplanes"), "kernel_size": kwargs.get("kernel_size", 3),
                "with_relu": kwargs.get("with_relu", False), "small_init": kwargs.get("do_init_weights", False),
                "out_name": kwargs.get("out_name", "adapt_neck_features")}
        parts.append(part)
        notes.append(f"{path}: UP's ADAP {entry.get('name')} read as distill.adapt (trained beside the student, "
                     "left out of the exported model)")
    net[:] = [e for e in net if not (isinstance(e, dict) and e.get("type") == "ADAP")]
    return parts


def _complete_teacher(net, student, notes, key):
    """(net, parts): a teacher list whose entries are the start of the student's (by name, and
    by type after the backbone) gets the student's later entries so it builds; only its own
    parts need weights."""
    if not (isinstance(net, list) and isinstance(student, list) and 0 < len(net) < len(student)):
        return net, None

    def ids(entries):
        return [(e.get("name"), e.get("type") if i else None) if isinstance(e, dict) else None
                for i, e in enumerate(entries)]
    if ids(net) != ids(student[:len(net)]):
        return net, None
    names = [e["name"] for e in net]
    rest = student[len(net):]
    notes.append(f"{key}: the teacher stops at {names[-1]}; the student's {', '.join(e['name'] for e in rest)} "
                 "complete it (built, not loaded, their outputs unused)")
    return [*net, *rest], names


def translate_distill(cfg, notes):
    """Rewrite UP's teacher*/mimic/runtime.runner into ``distill`` (in place)."""
    runner = _runner_type(cfg)
    if isinstance(cfg.get("runtime"), dict):
        cfg["runtime"].pop("runner", None)
    tkeys = _teacher_keys(cfg)
    runner = translate_sparse(cfg, runner, notes)  # UP's sparse runner + sparsity section (up_sparse.py)
    if runner not in (None, "kd", "base"):
        raise ConfigError("runtime.runner.type", f"UP's {runner!r} runner is not mapped",
                          "mapped runners: base, kd, quant, sparse, multitask, bignas")
    if runner != "kd":
        if runner == "base":
            notes.append("runtime.runner: base (UP's default runner) recorded")
        for key in tkeys + (["mimic"] if "mimic" in cfg else []):
            cfg.pop(key)
            notes.append(f"{key}: ignored as in UP (only runtime.runner: kd reads it)")
        return
    if "mimic" not in cfg:
        raise ConfigError("mimic", "runtime.runner kd needs a mimic section", "UP's configs/distiller files show it")
    if not tkeys:
        raise ConfigError("teacher", "runtime.runner kd needs a teacher net", "a top-level teacher: [...] net list")
    teacher_nets = {k: cfg.pop(k) for k in tkeys}
    adapt = _adapt_parts(cfg.get("net"), notes)
    mimic = cfg.pop("mimic")
    task_loss = mimic.get("task_loss", True) if isinstance(mimic, dict) else True
    jobs, prefix = _jobs(mimic)
    native_jobs, teacher_cfgs = [], {}
    for name, job in jobs.items():
        native, teachers = _job(name, job, join_path("mimic", name) if prefix == "mimic." else "mimic", teacher_nets)
        native_jobs.append(native)
        teacher_cfgs.update(teachers)
    native_teachers = []
    for key, net in teacher_nets.items():
        if key not in teacher_cfgs:  # UP builds it anyway ("a waste of CUDA memory"); we leave it out
            notes.append(f"{key}: no mimic job names this teacher; not built")
            continue
        t = teacher_cfgs[key]
        net, parts = _complete_teacher(net, cfg.get("net"), notes, key)
        native = {"name": key, "net": _teacher_net(net, notes, key),
                  "weight": t.get("teacher_weight"),  # UP: any mode but train is eval
                  "bn_mode": "train" if t.get("teacher_bn_mode") == "train" else "eval"}
        if parts:
            native["parts"] = parts
        native_teachers.append(native)
    cfg["distill"] = {"task_loss": task_loss, "teachers": native_teachers, "mimic": native_jobs}
    if adapt:
        cfg["distill"]["adapt"] = adapt
    notes.append(f"runtime.runner: kd: {', '.join(tkeys)} and mimic read as distill (docs/distill.rst)")
