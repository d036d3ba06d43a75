"""User-facing errors.

Anything the user can fix by editing YAML, CLI flags, data files or by pointing at another
checkpoint raises a subclass of :class:`UserError`. The CLI prints its one-line message and
exits with code 2; nothing else is ever shown as a traceback for these.
"""
import difflib
import re
import reprlib


class UserError(Exception):
    """An error caused by input the user controls. Exit code 2, no traceback."""

    exit_code = 2


def shown_path(path):
    """A key path as the error line shows it: quoted when blank-edged or unprintable (a key
    ``' '`` would otherwise read as no path at all)."""
    text = str(path)
    return repr(text) if text != text.strip() or not text.isprintable() else text


class ConfigError(UserError):
    """A bad configuration value. ``path`` is the YAML key path, e.g. ``hooks[2].kwargs.max_norm``."""

    def __init__(self, path, message, hint=None):
        self.path = path
        self.message = message
        self.hint = hint
        text = f"{shown_path(path)}: {message}" if path else message
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class CheckpointError(UserError):
    """A checkpoint that is missing, truncated, corrupt or not ours."""


class DataError(UserError):
    """A data file or record that cannot be used."""


class RunFailure(Exception):
    """Neither the user's input nor a bug: the machine failed the run (a DataLoader worker
    killed by the out-of-memory killer). The CLI prints its one line and exits 1, no traceback."""

    exit_code = 1


class TrainingInterrupted(Exception):
    """Raised at an iteration boundary after an interrupt snapshot was written.

    ``exit_code`` is 130 for SIGINT and 143 for SIGTERM, as a shell reports them.
    """

    def __init__(self, exit_code, message=""):
        self.exit_code = exit_code
        super().__init__(message or f"training interrupted (exit {exit_code})")


def did_you_mean(name, choices, n=3):
    """A ``did you mean 'x'?`` hint for a misspelt name, or None when nothing is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=n, cutoff=0.6)
    if not close:
        return None
    return "did you mean " + " or ".join(repr(c) for c in close) + "?"


# Values quoted inside an error message are cut to this many characters: a message is one
# readable line, whatever the value (a YAML alias bomb once made a 50 MB stderr line).
VALUE_CHARS = 200
MESSAGE_CHARS = 2000


def short_repr(value, limit=VALUE_CHARS):
    """``repr(value)`` cut to ``limit`` characters. reprlib stops at a few levels and items per
    container, so quoting an enormous (or alias-shared) value costs nothing."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 8, 8, 8
_REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = _REPR.maxarray = 8
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = VALUE_CHARS


# A value quoted as repr quotes it, or a run of characters without a space (a key path, a
# file name, a bare value): the parts of a message that can be arbitrarily long.
_LONG_PART = re.compile(r"""(?<!\w)'[^'\n]{%d,}'(?!\w)|(?<!\w)"[^"\n]{%d,}"(?!\w)|\S{%d,}"""
                        % (VALUE_CHARS - 1, VALUE_CHARS - 1, VALUE_CHARS + 1))


def shorten(text, limit=MESSAGE_CHARS):
    """The one place a message is cut before it is printed: every quoted value and every run
    without a space longer than VALUE_CHARS is cut to VALUE_CHARS characters in its middle
    (its start and its end stay, as reprlib cuts), then the whole message to ``limit``."""
    text = _LONG_PART.sub(lambda m: _cut_middle(m.group(0), VALUE_CHARS), text[:64 * limit])
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _cut_middle(text, limit):
    tail = (limit - 3) // 4
    return text[:limit - 3 - tail] + "..." + text[len(text) - tail:]


def printable(text):
    """``text`` on one line: control characters (a newline in a path) written as escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def join_path(path, key):
    """Extend a YAML key path: ``join_path('hooks', 2) == 'hooks[2]'``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)
