"""Config fuzzing: mutated configs never produce a traceback, only exit 2 with a key path."""
import copy
import re

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import invoke, tiny_cfg
from up_trainer.config import resolve_config
from up_trainer.engine.builder import build_hooks
from up_trainer.errors import UserError

BASE = tiny_cfg(hooks=[{"type": "auto_save_best", "kwargs": {"mode": "max"}},
                       {"type": "train_val_logger", "kwargs": {"freq": 5}}])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


def paths(node, prefix=()):
    """Every (path) into the config: dict keys and list indexes."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, (*prefix, i))
    return out


ALL_PATHS = paths(BASE)


@st.composite
def mutated(draw):
    cfg = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["set", "delete", "add"]))
        path = draw(st.sampled_from(ALL_PATHS))
        parent = cfg
        try:
            for part in path[:-1]:
                parent = parent[part]
            if kind == "set":
                parent[path[-1]] = draw(values)
            elif kind == "delete":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed or replaced this path
    return cfg


PATHED = re.compile(r"^up: error: \S.*: .+")


def check(tmp_path, text):
    p = tmp_path / "fuzz.yaml"
    p.write_text(text)
    res = invoke(["config", "--config", str(p)])
    assert res.exit_code in (0, 2), (text, res.exception)
    assert "Traceback" not in res.stderr
    if res.exit_code == 2:
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and PATHED.match(lines[0]), (text, res.stderr)
        return
    try:  # constructors run their own checks: they must be user errors too, never crashes
        build_hooks(resolve_config(str(p))["hooks"])
    except UserError as exc:
        assert ": " in str(exc), str(exc)


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(cfg=mutated())
def test_mutated_configs(tmp_path_factory, cfg):
    check(tmp_path_factory.mktemp("f"), yaml.safe_dump(cfg))


def test_a_blank_key_is_quoted_in_the_error_line(tmp_path):
    cfg = copy.deepcopy(BASE)
    cfg[" "] = 1
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = invoke(["config", "--config", path])
    assert res.exit_code == 2 and res.stderr.startswith("up: error: ' ': unknown section"), res.stderr


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(text=st.text(alphabet=st.sampled_from(list("ab:{}[]-,&*!|>'\"#%@ \n\t0x.")), max_size=60))
def test_random_yaml_text(tmp_path_factory, text):
    check(tmp_path_factory.mktemp("t"), text)
