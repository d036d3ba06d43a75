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
    """Each kwarg is named within the README text that follows one mention of its hook."""
    missing = []
    for name in HOOKS.names():
        if not HOOKS.get(name).__module__.startswith("up_trainer."):
            continue  # registered by a test's plugin module
        starts = [m.start() for m in re.finditer(rf"\b{re.escape(name)}\b", README)]
        if not starts:
            missing.append(name)
            continue
        for kwarg, _ in public_params(HOOKS.get(name)):
            near = any(re.search(rf"\b{re.escape(kwarg)}\b", README[s:s + 6000]) for s in starts)
            if not near:
                missing.append(f"{name}.{kwarg}")
    assert not missing, missing


def test_readme_parses_as_restructuredtext():
    """A malformed table renders as an error box on the package page: none may be left."""
    import io

    import docutils.core

    errors = io.StringIO()
    docutils.core.publish_doctree(README, settings_overrides={"report_level": 2, "halt_level": 5,
                                                              "warning_stream": errors})
    assert not errors.getvalue(), errors.getvalue()
