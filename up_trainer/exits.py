"""The exit-code policy of every `up` command and of every worker process it starts.

User errors (:class:`~up_trainer.errors.UserError`): one line on stderr, exit 2.
Interrupts (:class:`~up_trainer.errors.TrainingInterrupted`): their own code, 130 or 143.
Ctrl-C elsewhere: 130. A :class:`~up_trainer.errors.RunFailure` (a DataLoader worker that died): one
line, exit 1.
Anything else is a bug: the traceback, exit 1. Whatever is printed goes through the secret
redactor (config/redact.py) first, tracebacks included.
"""
import functools
import sys

import click

from .config.redact import install_excepthooks, redact_text
from .errors import RunFailure, TrainingInterrupted, UserError, shorten


def one_line(text):
    """The message as one line. A DataLoader worker re-raises a user error with the worker's
    traceback in the text: its last line is the original message. Other control characters
    (a YAML key may hold any) are escaped."""
    if "Original Traceback" in text:
        last = [line for line in text.splitlines() if line.strip()][-1]
        text = last.split(": ", 1)[1] if last.split(": ", 1)[0].endswith("Error") else last
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def run_safely(fn):
    """``fn`` under the policy above: user errors and interrupts become exit codes."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        install_excepthooks()
        try:
            return fn(*args, **kwargs)
        except UserError as exc:  # redacted before it is cut: a cut could split a secret
            click.echo(f"up: error: {shorten(one_line(redact_text(str(exc))))}", err=True)
            sys.exit(exc.exit_code)
        except RunFailure as exc:  # a DataLoader worker that died (data/worker_death.py)
            click.echo(f"up: error: {shorten(one_line(redact_text(str(exc))))}", err=True)
            sys.exit(exc.exit_code)
        except TrainingInterrupted as exc:
            click.echo(f"up: {redact_text(str(exc))}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("up: interrupted", err=True)
            sys.exit(130)

    return wrapper
