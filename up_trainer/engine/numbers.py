"""Numeric hyper-parameters as YAML gives them: finite numbers, never quoted strings.

torch's optimizers and schedules accept ``lr: .nan`` (``nan < 0`` is False) and train to NaN
weights, and a quoted ``'0.1'`` either fails deep inside torch or, for list kwargs such as
``milestones: ['1']``, silently does string arithmetic (``'1' * 4 == '1111'``). Checked here,
before anything is built, so the message names the key.
"""
import math

from ..errors import ConfigError, join_path


def _looks_numeric(text):
    try:
        float(text.strip().replace("_", ""))
    except ValueError:
        return False
    return bool(text.strip())


def check_numbers(value, path):
    """Raise ConfigError for a NaN/infinite number or a quoted number anywhere in ``value``
    (dicts and lists are walked; other strings, bools and None pass)."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(path, f"must be a finite number, got {value!r}")
    if isinstance(value, str) and _looks_numeric(value):
        raise ConfigError(path, f"a quoted number {value!r} is a string here",
                          f"write {value.strip()} without quotes")
    if isinstance(value, dict):
        for key, item in value.items():
            check_numbers(item, join_path(path, key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_numbers(item, join_path(path, i))
