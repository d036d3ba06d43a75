"""Read a YAML config: safe_load semantics, ``_base_`` inheritance, ``_delete_`` replacement."""
import logging
import os

import yaml

from ..errors import ConfigError
from ..paths import config_error, open_input
from .anchors import anchor_only_keys

# Limits far above any real config (UP's largest is a few KB, nested < 15 deep), low enough
# that a hostile file fails at once: /dev/zero as a config, an alias bomb (a few lines that
# expand to a billion nodes once anything walks them), or nesting deep enough for Python's
# recursion limit.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_NODES = 200_000  # nodes after alias expansion
MAX_DEPTH = 100
log = logging.getLogger("up")


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that warns of a key repeated with another value (YAML silently keeps the last
    one) and refuses documents past the depth and alias-expansion limits.

    The limits are checked as the composer consumes events, before it recurses one level
    deeper or a Python object exists: a collection's expanded size is known at its end
    event, an alias adds its anchor's size."""

    def __init__(self, stream):
        super().__init__(stream)
        self._sizes = [0]  # expanded node count of each open collection (the root at [0])
        self._anchor_sizes = {}
        self._open_anchors = []

    def get_event(self):
        event = super().get_event()
        if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            size = 1 if isinstance(event, yaml.ScalarEvent) else self._anchor_sizes.get(event.anchor, 1)
            if isinstance(event, yaml.ScalarEvent) and event.anchor:
                self._anchor_sizes[event.anchor] = 1
            self._add(size, event)
        elif isinstance(event, yaml.CollectionStartEvent):
            if len(self._sizes) > MAX_DEPTH:
                self._refuse(event, f"is nested deeper than {MAX_DEPTH} levels")
            self._sizes.append(1)
            self._open_anchors.append(event.anchor)
        elif isinstance(event, yaml.CollectionEndEvent):
            size = self._sizes.pop()
            anchor = self._open_anchors.pop()
            if anchor:
                self._anchor_sizes[anchor] = size
            self._add(size, event)
        return event

    def _add(self, size, event):
        self._sizes[-1] += size
        if sum(self._sizes) > MAX_NODES:
            self._refuse(event, f"expands to more than {MAX_NODES} values (YAML aliases repeating "
                                "aliases: an alias bomb?)")

    def _refuse(self, event, what):
        mark = event.start_mark
        raise ConfigError(f"{mark.name}:{mark.line + 1}", f"the document {what}")


def _construct_mapping(loader, node, deep=False):
    """A mapping; a key given twice keeps its last value, as PyYAML (and so UP) does. Two equal
    values lose nothing (UP's cascade file repeats ``bbox_score_thresh: 0.0``); two different
    ones are a one-line warning naming the key and both lines (UP's
    ``retinanet-xmnet-improve.yaml`` gives one key twice), so such a file runs unchanged and
    the dropped value is not silent."""
    seen = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            first_line, first_value = seen[key]
            if loader.construct_object(value_node, deep=True) != loader.construct_object(first_value, deep=True):
                mark = key_node.start_mark
                log.warning("%s:%d: key %r given twice with different values (lines %d and %d): the last one is "
                            "used, as PyYAML does", mark.name, mark.line + 1, key, first_line + 1, mark.line + 1)
        seen[key] = (key_node.start_mark.line, value_node)
    loader.flatten_mapping(node)
    return dict(loader.construct_pairs(node, deep=deep))


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text, source="<string>"):
    """Parse YAML text with safe_load semantics; errors become one-line ConfigErrors."""
    try:
        loader = _UniqueKeyLoader(text)
        loader.name = source
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        tag = exc.problem or ""
        if "python/" in tag or "!!python" in str(exc):
            raise ConfigError(where, "python object tags are not allowed in configs (plain YAML values only)") from None
        raise ConfigError(where, f"unsupported YAML tag: {tag}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(where, f"invalid YAML: {problem}") from None


def read_yaml_file(path, what="config file"):
    try:  # a FIFO, a device or a directory is refused at the open (paths.open_input)
        with open_input(path, what, config_error, text=True) as f:
            text = f.read(MAX_CONFIG_BYTES + 1)  # never more: a huge file is no config
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(None, f"cannot read {what} {path}: {exc}") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(None, f"{what} {path} is larger than {MAX_CONFIG_BYTES // 2**20} MiB: not a config")
    data = parse_yaml(text, source=path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"the top level must be a mapping of sections, got {type(data).__name__}")
    return drop_anchor_holders(data, text)


def drop_anchor_holders(data, text):
    """Remove top-level keys that only hold an anchor aliased elsewhere (UP's ``num_classes:
    &num_classes 1000``); their values already live where the aliases are (config/anchors.py)."""
    from .schema import SECTIONS

    for key in anchor_only_keys(text):
        if key not in SECTIONS and key != "_base_":
            data.pop(key, None)
    return data


def numpy_scalar(value):
    """``value`` as a plain Python value where it is a numpy scalar (np.int64, np.float32,
    np.bool_, ...) or a 0-d numpy array, which a config given as a mapping may hold (values
    computed with numpy); anything else unchanged. numpy is not imported for this: a value
    that comes from numpy has it loaded already."""
    if type(value).__module__ != "numpy" or not hasattr(value, "item") or getattr(value, "ndim", None) != 0:
        return value
    return value.item()


def deep_merge(base, override):
    """Merge ``override`` into a copy of ``base``. Mappings merge key by key; anything else
    (lists included) replaces. ``_delete_: true`` in a mapping replaces instead of merging."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return override
    if override.get("_delete_") is True:
        return {k: v for k, v in override.items() if k != "_delete_"}
    out = dict(base)
    for key, value in override.items():
        out[key] = deep_merge(base[key], value) if key in base else _strip_delete(value)
    return out


def _strip_delete(value):
    if isinstance(value, dict):
        return {k: _strip_delete(v) for k, v in value.items() if k != "_delete_"}
    return value


def load_file(path, _stack=(), files=None):
    """Load ``path`` with its ``_base_`` files merged underneath (relative to ``path``).
    ``files``: a list that receives the path of every file read (the inputs an output must
    never overwrite)."""
    real = os.path.realpath(path)
    if real in _stack:
        chain = " -> ".join(os.path.basename(p) for p in (*_stack, real))
        raise ConfigError(f"{path}: _base_", f"inheritance cycle: {chain}")
    what = "config file" if not _stack else "_base_ file"
    data = read_yaml_file(path, what)
    if files is not None:
        files.append(str(path))
    return merge_bases(data, os.path.dirname(path), f"{path}: _base_", (*_stack, real), files)


def merge_bases(data, base_dir, where, _stack=(), files=None):
    """``data`` with the files its ``_base_`` names (relative to ``base_dir``; "" is the current
    directory) merged underneath, in order. ``where`` names the key in errors."""
    bases = data.pop("_base_", None)
    if bases is None:
        return data
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise ConfigError(where, "expected a file name or a list of file names")
    merged = {}
    for base in bases:
        base_path = base if os.path.isabs(base) else os.path.join(base_dir, base)
        if not os.path.exists(base_path):
            raise ConfigError(where, f"_base_ file not found: {base} (looked at {os.path.abspath(base_path)})")
        merged = deep_merge(merged, load_file(base_path, _stack, files))
    return deep_merge(merged, data)
