"""Files the user names: the one opener for inputs, the one guard for outputs.

Inputs (a config and its ``_base_`` files, checkpoints, pretrained weights, data files named
in a config) are opened with :func:`open_input`: anything but a regular file is refused in
one line. A FIFO would otherwise block the open until some writer appears (forever), and a
device or a directory would be read as garbage or fail deep inside a library.

Outputs (the run dir, saver.save_dir, saver.results_dir, ``up predict --out``, ``up export
--out``, ``up data --out``) are checked by :func:`guard_output_dir` / :func:`guard_output_file`
when a command starts, before any work, so a mistake costs nothing. An output must be:

- a directory (or, for a file output, a regular file), or not exist yet: then the nearest
  existing folder above it is checked, and nothing is created by the check;
- writable: a probe file is written, synced and removed (a read-only mount, missing
  permissions or a full disk fail here, not after the run);
- not one of the inputs: no input file may sit under a name the command writes (a run dir's
  config.yaml over the user's config, a drawing over an input image); a directory the command
  fills with names of its own choosing (``up predict --out``) may hold no input at all.
  Inputs are compared by real path and by inode, so symlinks and hard links count; an input
  named through a symlink is in the folder of the link and in that of every link it leads
  through as well as in its target's (:func:`_entries`).
"""
import os
import stat

from .errors import ConfigError, UserError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def resolve_path(path, work_dir):
    """A path from the config (saver.save_dir, results_dir, resume_model, ...): relative ones
    resolve against --work-dir when given, else the current directory. The one rule: the run's
    paths (run_paths.py), the builder and the commands all resolve through it."""
    if path is None or os.path.isabs(path):
        return path
    return os.path.join(work_dir or os.getcwd(), path)


def kind_of(mode):
    """'a regular file', 'a directory', 'a FIFO (named pipe)', ... for a stat mode."""
    if stat.S_ISREG(mode):
        return "a regular file"
    for test, name in _KINDS:
        if test(mode):
            return name
    return "an unknown kind of file"


# -- inputs --------------------------------------------------------------------------------------
def open_input(path, what, error=UserError, text=False):
    """Open the user-named input ``path`` for reading (binary, or UTF-8 text).

    ``what`` names it in messages ("config file", "checkpoint"); ``error`` is the UserError
    class raised (called with the message). The open itself never blocks: O_NONBLOCK makes a
    FIFO's open return at once, the file's type is checked on the open descriptor (no race
    with a rename), and blocking reads are switched back on for a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{what} {path} is {kind_of(mode)}, not a regular file")
        os.set_blocking(fd, True)
        if text:
            return os.fdopen(fd, "r", encoding="utf-8")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def config_error(message):
    """``error`` for :func:`open_input` where the config layer reports (no key path)."""
    return ConfigError(None, message)


# -- outputs -------------------------------------------------------------------------------------
def check_writable(path, what):
    """Fail in one line when ``path`` (or the folder that would hold it) cannot take a file:
    read-only, not ours, or a full disk. Nothing is created that was not there."""
    probe_dir = os.path.abspath(path)
    while not os.path.isdir(probe_dir):
        if os.path.lexists(probe_dir):
            held = "" if probe_dir == os.path.abspath(path) else f" (it would hold {path})"
            raise ConfigError(what, f"{probe_dir if held else path} is {_kind_at(probe_dir)}, not a directory{held}")
        parent = os.path.dirname(probe_dir)
        if parent == probe_dir:
            break
        probe_dir = parent
    probe = os.path.join(probe_dir, f".up-write-test.{os.getpid()}")
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise ConfigError(what, f"cannot write in {probe_dir}: {exc.strerror or exc}") from None
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass


def _kind_at(path):
    try:
        return kind_of(os.stat(path).st_mode)
    except FileNotFoundError:
        return "a dangling symlink"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"


def _same(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _real_inputs(inputs):
    """Real paths of the inputs that exist (a missing one is reported where it is read)."""
    return [os.path.realpath(p) for p in dict.fromkeys(str(p) for p in inputs if p) if os.path.exists(p)]


def _entries(path):
    """Every directory entry the input ``path`` is reached through, each as its folder's real
    path plus its name: the name given, then each symlink it leads through, to the file itself.
    An input named through a link in the output folder is in that folder as much as its
    target is (the next command that lists the folder reads what was written beside it)."""
    out, current = [], os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on a chain of links
        entry = os.path.join(os.path.realpath(os.path.dirname(current)), os.path.basename(current))
        if entry in out:
            break
        out.append(entry)
        if not os.path.islink(entry):
            break
        current = os.path.join(os.path.dirname(entry), os.readlink(entry))  # relative: from the link's folder
    return out


def _input_entries(inputs):
    """(entry, the input's real path) for every entry of every existing input (see :func:`_entries`)."""
    return [(entry, os.path.realpath(p)) for p in dict.fromkeys(str(p) for p in inputs if p) if os.path.exists(p)
            for entry in _entries(p)]


def guard_output_dir(path, what, *, inputs=(), writes=None, apart_from=()):
    """Check, before any work, that ``path`` can be the output directory ``what`` (see the
    module doc). ``writes``: the file names the command writes in it (a collection), or a
    predicate on a name (names it may write), or None when the command fills the directory
    with names of its own choosing. ``apart_from``: inputs (folders, or files: their folders)
    the output may lie neither in nor around (``up data convert``: a tree beside its source)."""
    check_writable(path, what)
    _require_apart(path, what, apart_from)
    if not os.path.isdir(path):
        return  # made later, empty: it can hold no input and nothing in the way
    listed = tuple(writes) if isinstance(writes, (list, tuple, set, frozenset)) else ()
    for name in listed:  # files opened for writing by name: regular files we may replace
        target = os.path.join(path, name)
        if os.path.lexists(target) and not os.path.isfile(target):
            raise ConfigError(what, f"{target} is {_kind_at(target)}; the command writes a file {name} there")
        if os.path.lexists(target) and not os.access(target, os.W_OK):
            raise ConfigError(what, f"cannot write {target}: permission denied")
    for entry, real in _input_entries(inputs):
        folder, name = os.path.split(entry)
        inside = _same(folder, path)
        shown = real if entry == real else f"{entry} (a link to {real})"
        if writes is None and inside:
            raise ConfigError(what, f"{path} holds the input {shown}; give an output directory of its own")
        overwritten = inside and (name in listed or (callable(writes) and writes(name)))
        if overwritten or any(_same(os.path.join(path, n), real) for n in listed):  # links count
            raise ConfigError(what, f"writing in {path} would overwrite the input {shown} "
                              "(move that file, or give another directory)")


def _require_apart(path, what, inputs):
    """ConfigError where the folder ``path`` (by real path) is, holds or lies in the folder of
    any entry an input is reached through (:func:`_entries`)."""
    out = os.path.realpath(path)
    for given in dict.fromkeys(str(p) for p in inputs if p):
        if not os.path.exists(given):
            continue
        for entry in _entries(given):
            real = os.path.realpath(entry)
            folder = real if os.path.isdir(real) else os.path.dirname(entry)
            if out == folder or out.startswith(folder + os.sep) or folder.startswith(out + os.sep):
                raise ConfigError(what, f"{path} lies in or around the input {given}; give a folder of its own")


def guard_output_file(path, what, *, inputs=()):
    """Check, before any work, that ``path`` can be the output file ``what``: a regular file
    we may replace or a new name in a writable folder, and not one of the inputs."""
    if os.path.lexists(path):
        if not os.path.isfile(path):
            raise ConfigError(what, f"{path} is {_kind_at(path)}; give a file name")
        for real in _real_inputs(inputs):
            if _same(path, real):
                raise ConfigError(what, f"{path} is the input {real}; writing it would destroy it")
        if not os.access(path, os.W_OK):
            raise ConfigError(what, f"cannot write {path}: permission denied")
    check_writable(os.path.dirname(os.path.abspath(path)), what)
