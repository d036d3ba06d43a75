"""The Python examples of README.rst and docs/python_api.rst run as written, on smaller data
sets (the only change: the options that size the run) and in a temporary directory."""
import os
import re

import pytest

from conftest import REPO

SMALL = '"trainer.max_epoch=1", "dataset.train.kwargs.subset=64", "dataset.test.kwargs.subset=32"'


def first_python_block(path, start):
    text = open(os.path.join(REPO, path), encoding="utf-8").read()
    head = text.index(start)
    lines = []
    for line in text[head:].splitlines()[1:]:
        if line.strip() and not line.startswith("    "):
            break
        lines.append(line[4:])
    code = "\n".join(lines).strip()
    assert "up_trainer.train(" in code
    return code.replace('"trainer.max_epoch=2"', SMALL).replace('"configs/', '"' + REPO + "/configs/")


@pytest.mark.slow  # ResNet-18 on the demo config: 30 s each on 2 cores at load 10
@pytest.mark.parametrize("path, start", [("README.rst", "notebook: ``examples/python_api.ipynb``)::"),
                                         ("docs/python_api.rst", ".. code-block:: python")])
def test_the_example_runs(tmp_path, monkeypatch, capsys, path, start):
    code = first_python_block(path, start)
    assert SMALL in code
    monkeypatch.chdir(tmp_path)
    exec(compile(code, path, "exec"), {})
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.search(r"\d", printed), printed
    assert os.path.isdir(tmp_path / "runs" / "digits" / "checkpoints")
