"""A run directory that already holds a run: continue it, or start over on purpose.

`up train` in a directory whose save_dir holds checkpoints is a second start over the same
files: metrics.csv and ckpt_latest.pth would be reset while the old ckpt_best.pth stays beside
them. So the CLI refuses it in one line that offers both ways on: resume (the exact command,
``--resume`` the newest checkpoint) or ``--fresh``, which moves the old run's files into a
timestamped folder in the run dir and starts over. A resume of any kind (--resume,
saver.auto_resume, saver.resume_model) is what such a directory is for and is never refused.

Also here: the command that resumes a run, printed by the refusal and by the exit line of an
interrupted run (Ctrl-C, SIGTERM).
"""
import datetime
import logging
import os
import shlex
import shutil

from .config.redact import redact_argv
from .engine.checkpoint import BEST, LATEST, parse_name
from .errors import UserError

log = logging.getLogger("up")

FRESH_FLAG = "--fresh"
MOVED_PREFIX = "replaced-"
# Flags of `up train` that take one value and must not be repeated in a printed command.
_VALUE_FLAGS = ("--resume",)


def checkpoint_files(save_dir):
    """Names of the checkpoints in ``save_dir`` (latest, best, numbered, interrupt snapshots)."""
    if not os.path.isdir(save_dir):
        return []
    return sorted(n for n in os.listdir(save_dir)
                  if (n in (LATEST, BEST) or parse_name(n) is not None) and os.path.isfile(os.path.join(save_dir, n)))


def newest_checkpoint(save_dir, names):
    """The checkpoint a resume should name: ckpt_latest.pth (it always names the newest
    complete one), else the numbered file furthest into training, else ckpt_best.pth."""
    if LATEST in names:
        return os.path.join(save_dir, LATEST)
    numbered = sorted((parse_name(n)[0], parse_name(n)[1] or 0, n) for n in names if parse_name(n))
    return os.path.join(save_dir, numbered[-1][2] if numbered else names[0])


def command_line(argv, extra=(), drop=(FRESH_FLAG,)):
    """The `up` command ``argv`` (its arguments, as the user gave them) without the flags in
    ``drop`` (and their values), plus ``extra``; secrets redacted."""
    prog = os.environ.get("UP_PROG_NAME", "up")
    out, skip = [], False
    for arg in redact_argv(["up", *argv])[1:]:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in drop:
            skip = name in _VALUE_FLAGS and "=" not in arg
            continue
        out.append(arg)
    return shlex.join([prog, *out, *extra])


def resume_command(checkpoint, argv):
    return command_line(argv, ["--resume", checkpoint], drop=(FRESH_FLAG, *_VALUE_FLAGS))


def is_resume(cfg, resume):
    saver = cfg["saver"]
    return bool(resume or saver.get("auto_resume") or saver.get("resume_model"))


def refuse_over_run(cfg, save_dir, resume, fresh, argv):
    """UserError when ``save_dir`` holds checkpoints and this run neither resumes nor was told
    ``--fresh`` (``argv``: the command's arguments, for the two commands the message offers);
    returns the checkpoint names found."""
    if is_resume(cfg, resume):
        return []
    names = checkpoint_files(save_dir)
    if names and not fresh:
        from .engine.preflight import check_buildable

        check_buildable(cfg)  # a mistake in the config is the first thing to fix: said before the refusal
        newest = newest_checkpoint(save_dir, names)
        raise UserError(f"{save_dir} holds the checkpoints of a run already ({len(names)}: {', '.join(names[:4])}"
                        f"{', ...' if len(names) > 4 else ''}): continue it with `{resume_command(newest, argv)}`, or "
                        f"start over with `{command_line(argv, [FRESH_FLAG])}` (moves the old run's files aside)")
    return names


def move_aside(run_dir, written):
    """Move the files an earlier run wrote into ``<run_dir>/replaced-<time>/``, each folder's
    files under its path relative to the run dir. ``written``: [(what, folder, names)], where
    names is a tuple of file names or a predicate on a name. Returns the folder (None when
    nothing was there to move)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    target = os.path.join(run_dir, MOVED_PREFIX + stamp)
    moved = 0
    for what, folder, names in written:
        if not os.path.isdir(folder):
            continue
        wanted = names if callable(names) else (lambda n, names=names: n in names)
        rel = os.path.relpath(folder, run_dir)
        sub = os.path.join(target, rel if not rel.startswith("..") else what.replace(" ", "_"))
        for name in sorted(os.listdir(folder)):
            src = os.path.join(folder, name)
            if wanted(name) and (os.path.isfile(src) or os.path.islink(src)):
                os.makedirs(sub, exist_ok=True)
                shutil.move(src, os.path.join(sub, name))
                moved += 1
    if moved:
        log.info("--fresh: the earlier run's %d file(s) moved to %s", moved, target)
        return target
    return None
