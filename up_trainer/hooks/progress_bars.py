"""train_val_logger's live progress bar: redrawn in place on a terminal, or, in a Jupyter
kernel, one notebook output updated in place (IPython's display, present wherever a kernel
runs: no widget library needed), so the log lines below it stay readable.

A bar is drawn at most every BAR_EVERY_S seconds (the logger checks the clock; each
iteration costs one perf_counter()); a notebook redraw is one display message to the front
end (measured in docs/python_api.rst, Notebook progress).
"""
import html
import sys

from .log_measures import isatty


def in_notebook():
    """Whether this process is a Jupyter kernel (IPython's kernel shell is running)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # an IPython too old or half imported: not a kernel we can draw in
        return False
    return shell is not None and hasattr(shell, "kernel")


def make_bar(stream):
    """The bar for where output goes: a notebook bar in a kernel, a terminal bar on a TTY, else None."""
    if in_notebook():
        return NotebookBar()
    if isatty(stream):
        return TerminalBar(stream)
    return None


class TerminalBar:
    """``|#####.....| 42.0% epoch 3 [10/24] eta 0:01:02`` on one line, rewritten with ``\\r``."""

    needs_clearing = True  # a log line must wipe the bar first, or it starts glued to it
    WIDTH = 30

    def __init__(self, stream):
        self.stream = stream
        self.shown = False

    def draw(self, frac, text):
        filled = int(frac * self.WIDTH)
        self.stream.write(f"\r|{'#' * filled}{'.' * (self.WIDTH - filled)}| {text}\033[K")
        self.stream.flush()
        self.shown = True

    def clear(self):
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False

    def close(self):
        self.clear()


class NotebookBar:
    """An HTML ``<progress>`` element and the same text, one display output updated in place."""

    needs_clearing = False  # its own output: log lines print below it untouched

    def __init__(self):
        self._handle = None

    def draw(self, frac, text):
        from IPython.display import HTML, display

        body = HTML(f'<progress value="{frac:.4f}" max="1" style="width: 30em"></progress> '
                    f"<code>{html.escape(text)}</code>")
        if self._handle is None:
            self._handle = display(body, display_id=True)
        else:
            self._handle.update(body)

    def clear(self):
        pass

    def close(self):
        self._handle = None  # the last drawing stays in the notebook
