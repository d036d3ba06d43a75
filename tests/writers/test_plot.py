"""`up plot RUN_DIR`: curves from metrics.csv to PNG."""
import math
import os

import pytest

from conftest import invoke
from up_trainer.plot import _panels
from up_trainer.writers.table import MetricsTable, read_rows


def fake_run(run_dir, epochs=3, epoch_len=10, freq=2):
    table = MetricsTable(str(run_dir))
    for e in range(1, epochs + 1):
        for i in range(freq, epoch_len + 1, freq):
            it = (e - 1) * epoch_len + i
            cls, box = 2.0 * math.exp(-it / 10), 1.0 * math.exp(-it / 20)
            table.write({"phase": "train", "epoch": e, "iter": it, "lr": 0.1 * (1 - it / 31), "cls_loss": cls,
                         "box_loss": box, "loss": cls + box, "grad_norm": 5.0 / (1 + it), "batch_time": 0.05})
        table.write({"phase": "eval", "epoch": e, "iter": e * epoch_len, "top1": 50.0 + 10 * e, "top5": 90.0 + e,
                     "num_samples": 64})
    return str(run_dir)


def test_panels_cover_losses_lr_grad_norm_and_metrics(tmp_path):
    panels = _panels(read_rows(fake_run(tmp_path)))
    assert [p[0] for p in panels] == ["loss", "learning rate", "grad norm", "top1", "top5"]
    loss_lines = panels[0][2]
    assert [label for label, _, _ in loss_lines] == ["loss", "box_loss", "cls_loss"]
    label, xs, ys = loss_lines[0]
    assert xs[:3] == [2.0, 4.0, 6.0] and len(xs) == 15 and ys[0] == pytest.approx(2 * math.exp(-0.2) + math.exp(-0.1))
    assert panels[3][2][0][1:] == ([1.0, 2.0, 3.0], [60.0, 70.0, 80.0])  # top1 against the epoch


def test_up_plot_writes_a_png(tmp_path):
    run_dir = fake_run(tmp_path / "run")
    res = invoke(["plot", run_dir])
    assert res.exit_code == 0, (res.stderr, res.exception)
    out = res.stdout.strip()
    assert out == os.path.join(run_dir, "results.png")
    import matplotlib.image

    img = matplotlib.image.imread(out)
    assert img.shape[0] > 300 and img.shape[1] > 900  # a 2x3 grid of panels
    assert img[..., :3].std() > 0.05  # not a blank canvas

    res = invoke(["plot", run_dir, "--out", tmp_path / "elsewhere" / "curves.png"])
    assert res.exit_code == 0 and os.path.getsize(tmp_path / "elsewhere" / "curves.png") > 10_000


def test_up_plot_without_metrics_is_a_one_line_error(tmp_path):
    res = invoke(["plot", tmp_path])
    assert res.exit_code == 2
    assert "no metrics.csv" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_matplotlib_is_a_dependency_of_the_package():
    """Plots are drawn on every run by default: `pip install -e .` must bring matplotlib."""
    import configparser

    from conftest import REPO

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(REPO, "setup.cfg"))
    required = [line.strip() for line in cfg["options"]["install_requires"].splitlines() if line.strip()]
    assert any(r.startswith("matplotlib") for r in required), required


def test_plotting_keeps_the_callers_matplotlib_backend(tmp_path):
    """Drawing needs no display and leaves a notebook's or script's backend and pyplot alone."""
    import subprocess
    import sys

    from conftest import REPO

    run_dir = fake_run(tmp_path / "run")
    code = ("import sys, matplotlib; matplotlib.use('svg'); from up_trainer.plot import plot_run; "
            f"out = plot_run({run_dir!r}); print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules, out)")
    env = dict(os.environ, PYTHONPATH=REPO, MPLBACKEND="", DISPLAY="")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    backend, pyplot_loaded, out = res.stdout.split()
    assert (backend, pyplot_loaded) == ("svg", "False")
    assert os.path.getsize(out) > 10_000 and res.stderr == ""
