"""examples/python_api.ipynb runs top to bottom in a real Jupyter kernel (nbclient), with its
QUICK sizes, so that it cannot rot; its outputs show the notebook progress bar."""
import os

import pytest

from conftest import REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = os.path.join(REPO, "examples", "python_api.ipynb")


@pytest.mark.slow  # a kernel, three ResNet-18 runs and an FCOS one: 100 s on 2 cores at load 10
def test_the_example_notebook_runs(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = next(c for c in nb.cells if c.cell_type == "code" and "QUICK = False" in c.source)
    params.source = params.source.replace("QUICK = False", "QUICK = True").replace(
        'WORK = "runs/notebook"', f"WORK = {str(tmp_path)!r}")
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    bars = [o for o in outputs if o.get("output_type") in ("display_data", "update_display_data")
            and "<progress" in o.get("data", {}).get("text/html", "")]
    assert bars, "a notebook progress bar, not terminal escapes"
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "\r|" not in text and "\x1b[K" not in text
    assert "eval epoch 1" in text  # the per-epoch metric lines are in the cell's output
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) == 3  # curves, classified digits, detected boxes
    assert os.path.exists(tmp_path / "lr0.1" / "checkpoints" / "ckpt_latest.pth")
