"""The YOLOX kwargs the small-data recipe brought in (``min_k``, ``bn_momentum``) and the
``precise_bn`` hook it lists, in hostile shapes, through ``up config`` on
configs/det/small_data_yolox.yaml: one line naming the key, exit 2, no traceback."""
import os

import pytest

from conftest import REPO, invoke  # noqa: E402

CONFIG = os.path.join(REPO, "configs", "det", "small_data_yolox.yaml")


@pytest.mark.parametrize("opt, where", [
    ("net.kwargs.min_k=0", "net.kwargs.min_k"),
    ("net.kwargs.min_k=2.5", "net.kwargs.min_k"),
    ("net.kwargs.min_k=abc", "net.kwargs.min_k"),
    ("net.kwargs.bn_momentum=0", "net.kwargs.bn_momentum"),
    ("net.kwargs.bn_momentum=1.5", "net.kwargs.bn_momentum"),
    ("net.kwargs.bn_momentum=.nan", "net.kwargs.bn_momentum"),
    ("net.kwargs.bn_momentum=abc", "net.kwargs.bn_momentum"),
])
def test_hostile_value_is_one_line_naming_the_key(opt, where):
    res = invoke(["config", "--config", CONFIG, "--opts", opt])
    assert res.exit_code == 2, res.stderr or res.exception
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("up: error: ") and "Traceback" not in res.stderr, res.stderr
    assert where in lines[0], lines[0]


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "abc", "true"])
def test_hostile_precise_bn_num_batches_is_one_line(value):
    """The precise_bn hook every small-data recipe lists: a bad num_batches stops ``up config``."""
    res = invoke(["config", "--config", CONFIG, "--opts", f"hooks.precise_bn.kwargs.num_batches={value}"])
    assert res.exit_code == 2, res.stderr or res.exception
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("up: error: ") and "Traceback" not in res.stderr, res.stderr
    assert "kwargs.num_batches" in lines[0], lines[0]
