"""A YAML key given twice with two different values: the last one is kept, as PyYAML (and UP)
does, with a one-line warning naming the key and both lines."""
import logging
import os

from up_trainer.config.loader import parse_yaml
from conftest import UP_FIXTURES, invoke  # noqa: E402


def test_last_value_kept_with_one_warning_naming_both_lines(caplog):
    with caplog.at_level(logging.WARNING, logger="up"):
        data = parse_yaml("a:\n  x: 0.0\n  y: 1\n  x: 0.5\n", source="f.yaml")
    assert data == {"a": {"x": 0.5, "y": 1}}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["f.yaml:4: key 'x' given twice with different values (lines 2 and 4): the last one is used, "
                     "as PyYAML does"]


def test_equal_repeats_are_silent(caplog):
    with caplog.at_level(logging.WARNING, logger="up"):
        assert parse_yaml("a: {x: 0.0, x: 0.0}\n") == {"a": {"x": 0.0}}
    assert not caplog.records


def test_ups_xmnet_file_reads_past_its_repeated_key(caplog):
    """UP's retinanet-xmnet-improve.yaml repeats a key with another value: it now reads, and
    stops only at its xmnet backbone (not mapped), in one line."""
    with caplog.at_level(logging.WARNING, logger="up"):
        res = invoke(["config", "--config", os.path.join(UP_FIXTURES, "det", "retinanet",
                                                         "retinanet-xmnet-improve.yaml")])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("up: error: net[0].type: xmnet is UP's XMNet backbone")
    assert [r.getMessage().split("/")[-1] for r in caplog.records] == [
        "retinanet-xmnet-improve.yaml:18: key 'resize' given twice with different values (lines 11 and 18): the last "
        "one is used, as PyYAML does"]
