"""README.rst stays true: its two commands, every config key, every hook and kwarg."""
import os
import re

from conftest import REPO
from up_trainer.config.schema import SCHEMAS
from up_trainer.registry import HOOKS, public_params

README = open(os.path.join(REPO, "README.rst"), encoding="utf-8").read()


def test_two_commands_present_and_ci_runs_the_test_command():
    assert "up train --config configs/cls/" in README
    test_cmd = re.search(r"^\s+(python3 -m venv .*pytest.*)$", README, re.M).group(1)
    ci = open(os.path.join(REPO, ".ci", "run"), encoding="utf-8").read()
    assert test_cmd in ci


def test_every_schema_key_is_documented():
    missing = [f"{s}.{k}" for s, schema in SCHEMAS.items() for k in schema
               if not re.search(rf"^{re.escape(k)}\s", README, re.M)]
    assert not missing, missing


def test_every_hook_and_kwarg_is_documented():
    missing = []
    for name in HOOKS.names():
        if f"``{name}``" not in README:
            missing.append(name)
        for kwarg, _ in public_params(HOOKS.get(name)):
            if not re.search(rf"``{re.escape(kwarg)}``", README):
                missing.append(f"{name}.{kwarg}")
    assert not missing, missing
