"""The docs stay true and build: README's two commands, every config key and hook, YAML that parses,
and ``sphinx-build -W`` (warnings are errors) over docs/."""
import glob
import io
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import REPO
from up_trainer.config.schema import SCHEMAS
from up_trainer.registry import HOOKS, public_params

DOCS = os.path.join(REPO, "docs")
README = open(os.path.join(REPO, "README.rst"), encoding="utf-8").read()
PAGES = {os.path.relpath(p, DOCS): open(p, encoding="utf-8").read()
         for p in sorted(glob.glob(os.path.join(DOCS, "**", "*.rst"), recursive=True))}


def _package_hooks():
    """Hooks of the package itself: a test's plugin module may have registered more."""
    return [n for n in HOOKS.names() if HOOKS.get(n).__module__.startswith("up_trainer.")]


def _yaml_blocks(text):
    """(line, source) of every ``.. code-block:: yaml`` body in a reST text."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"(\s*)\.\. code-block:: yaml\s*$", line)
        if not m:
            continue
        indent, body = len(m.group(1)), []
        for nxt in lines[i + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        code = [b for b in body if b.strip()]
        cut = min(len(b) - len(b.lstrip()) for b in code)
        yield i + 1, "\n".join(b[cut:] for b in body)


# -- README ---------------------------------------------------------------------------------------
def test_two_commands_present_and_ci_runs_the_test_command():
    assert "up train --config configs/cls/" in README
    test_cmd = re.search(r"^\s+(python3 -m venv .*pytest.*)$", README, re.M).group(1)
    ci = open(os.path.join(REPO, ".ci", "run"), encoding="utf-8").read()
    assert test_cmd in ci


def test_readme_parses_as_restructuredtext():
    """A malformed table renders as an error box on the package page: none may be left."""
    import docutils.core

    errors = io.StringIO()
    docutils.core.publish_doctree(README, settings_overrides={"report_level": 2, "halt_level": 5,
                                                              "warning_stream": errors})
    assert not errors.getvalue(), errors.getvalue()


def test_readme_links_point_at_pages_that_exist():
    links = re.findall(r"<(docs/[^>]+\.rst)>`__?", README)
    assert links, "README links into docs/"
    assert [p for p in links if not os.path.isfile(os.path.join(REPO, p))] == []


def test_readme_example_config_is_a_valid_config(tmp_path):
    """``up config`` checks it as ``up train`` would build it (net on the meta device, no data read)."""
    from conftest import invoke

    blocks = list(_yaml_blocks(README))
    assert len(blocks) == 1
    path = tmp_path / "example.yaml"
    path.write_text(blocks[0][1], encoding="utf-8")
    res = invoke(["config", "--config", path])
    assert res.exit_code == 0, res.stderr
    assert "grad_clipper" in res.stdout


# -- hand-written pages ---------------------------------------------------------------------------
def test_every_schema_key_is_documented_in_its_section_of_the_config_page():
    """config.rst has one table per section; each declared key starts a row of its section's table."""
    page = PAGES["config.rst"]
    missing = []
    for section, schema in SCHEMAS.items():
        m = re.search(rf"^{section}\n-+\n(.*?)(?=^\S[^\n]*\n[-=]{{3,}}\n|\Z)", page, re.M | re.S)
        body = m.group(1) if m else ""
        missing += [f"{section}.{k}" for k in schema if not re.search(rf"^{re.escape(k)}\s", body, re.M)]
    assert not missing, missing


def test_yaml_code_blocks_parse():
    bad = []
    for name, text in PAGES.items():
        for line, code in _yaml_blocks(text):
            try:
                yaml.safe_load(code)
            except yaml.YAMLError as exc:
                bad.append(f"{name}:{line}: {str(exc).splitlines()[0]}")
    assert not bad, bad


def test_hand_written_pages_name_only_hooks_that_exist():
    """Hook sections (``.. _hook-NAME:``) and hooks listed in YAML examples are registered hooks."""
    known = set(HOOKS.names())
    named = []
    for name, text in PAGES.items():
        named += [(name, h) for h in re.findall(r"^\.\. _hook-([\w]+):", text, re.M)]
        for _, code in _yaml_blocks(text):
            data = yaml.safe_load(code)
            entries = data.get("hooks") if isinstance(data, dict) else data if isinstance(data, list) else None
            named += [(name, e["type"]) for e in entries or () if isinstance(e, dict) and "type" in e]
    assert [(page, h) for page, h in named if h not in known] == []
    assert {h for _, h in named} >= {"auto_checkpoint", "ema", "memory_checkpoint"}  # the scan finds them


# -- the built site -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """docs/ built once with warnings as errors (one process, no network)."""
    out = tmp_path_factory.mktemp("site")
    res = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-j1", "-q", "-b", "html",
                          "-d", str(out / ".doctrees"), DOCS, str(out / "html")],
                         capture_output=True, text=True, timeout=300)
    return res, out / "html"


def test_docs_build_without_warnings(site):
    res, html = site
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr[-4000:]
    assert (html / "index.html").is_file()


def test_hook_reference_lists_every_hook_and_kwarg(site):
    """The page is generated from the registry: a new hook or kwarg appears with no doc edit."""
    res, html = site
    page = (html / "hook_reference.html").read_text(encoding="utf-8")
    missing = []
    for name in _package_hooks():
        if f'id="hook-reference-{name}"' not in page:
            missing.append(name)
            continue
        start = page.index(f'id="hook-reference-{name}"')
        end = page.find('id="hook-reference-', start + 1)
        section = page[start:end if end != -1 else None]
        missing += [f"{name}.{k}" for k, _ in public_params(HOOKS.get(name))
                    if f'<span class="pre">{k}</span>' not in section]
    assert not missing, missing


def test_index_reaches_resume_exit_codes_every_detection_family_and_up_page(site):
    """What a newcomer looks for is one click from the index page (two at most, via its pages)."""
    res, html = site
    index = (html / "index.html").read_text(encoding="utf-8")
    hrefs = set(re.findall(r'href="([^"#]+(?:#[^"]*)?)"', index))
    wanted = {"checkpoints.html#resume", "reliability.html#exit-codes", "up/nets.html#up-refused-nets"}
    wanted |= {p[:-4] + ".html" for p in PAGES if p.startswith(("detection/", "up/"))}
    assert sorted(wanted - hrefs) == []
