"""train_val_logger in a Jupyter kernel: the progress bar is one notebook output updated in
place (IPython's display), never terminal escapes in the cell's text; outside a kernel,
nothing changes."""
import io
import sys

import pytest

import up_trainer
from api_helpers import fast_cfg
from up_trainer.hooks.progress_bars import NotebookBar, TerminalBar, in_notebook, make_bar

IPython = pytest.importorskip("IPython")


class FakeKernelShell:
    kernel = object()  # what tells a kernel's shell from a terminal IPython


@pytest.fixture()
def kernel(monkeypatch):
    """This process as a kernel: get_ipython() answers with a kernel shell; displays are recorded."""
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", obj.data))

    def display(obj, display_id=None):
        shown.append(("display", obj.data))
        return Handle()

    import IPython.display

    monkeypatch.setattr(IPython, "get_ipython", lambda: FakeKernelShell())
    monkeypatch.setattr(IPython.display, "display", display)
    return shown


def test_the_bar_kind_follows_where_output_goes(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)  # IPython imported, no kernel
    assert not in_notebook() and make_bar(io.StringIO()) is None
    assert isinstance(make_bar(Tty()), TerminalBar)
    monkeypatch.setattr(IPython, "get_ipython", lambda: FakeKernelShell())
    assert in_notebook() and isinstance(make_bar(Tty()), NotebookBar)


def test_training_in_a_kernel_draws_one_updated_html_bar(tmp_path, kernel, monkeypatch, capsys):
    monkeypatch.setattr("up_trainer.hooks.train_val_logger.BAR_EVERY_S", 0.0)  # a redraw at every update
    result = up_trainer.train(fast_cfg(trainer={"max_epoch": 2}), work_dir=tmp_path)
    assert [kind for kind, _ in kernel[:2]] == ["display", "update"]
    assert all(kind == "update" for kind, _ in kernel[1:]), "one output, updated in place"
    last = kernel[-1][1]
    assert '<progress value="1.0000"' in last and f"epoch 2 [{result.iteration // 2}/" in last
    out = capsys.readouterr().out
    assert "\r" not in out and "\x1b[K" not in out
    assert "eval epoch 1" in out and "eval epoch 2" in out  # the metric lines stay in the cell's text


def test_text_in_the_bar_is_escaped(kernel):
    NotebookBar().draw(0.5, "<script>x</script>")
    assert "<script>" not in kernel[-1][1] and "&lt;script&gt;" in kernel[-1][1]
