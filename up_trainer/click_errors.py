"""Click's own errors (an unknown option, a missing --config, a value out of range) shown as
every user error is: one ``up: error:`` line naming the command's --help, exit 2; click alone
prints a usage block, a hint and the error on four lines."""
import contextlib

import click

from .errors import shorten
from .exits import one_line


class OneLineUsageError(click.ClickException):
    def __init__(self, error):
        super().__init__(error.format_message())
        self.exit_code = error.exit_code
        ctx = getattr(error, "ctx", None)
        self.hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""

    def show(self, file=None):
        click.echo(f"up: error: {shorten(one_line(self.message))}{self.hint}", err=True)


@contextlib.contextmanager
def _one_line_usage():
    try:
        yield
    except (OneLineUsageError, click.exceptions.NoArgsIsHelpError):  # the latter shows the help
        raise
    except click.ClickException as exc:
        raise OneLineUsageError(exc) from None


class OneLineErrorGroup(click.Group):
    """A group whose click errors, raised while parsing its own or a command's arguments (or
    by a command), become :class:`OneLineUsageError`, keeping click's exit code (2 for usage)."""

    def make_context(self, info_name, args, parent=None, **extra):
        with _one_line_usage():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx):
        with _one_line_usage():
            return super().invoke(ctx)
