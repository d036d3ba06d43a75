"""``load_config``: a config file or a Python mapping resolved exactly as ``up train`` resolves
a file (``_base_`` files, ``--opts``, default hooks, UP's form, validation), with every mistake
raised as :class:`~up_trainer.errors.ConfigError` (its ``path`` is the key path) instead of an
exit."""
import os

from ..errors import ConfigError, join_path, short_repr

# The same limits a YAML file is held to (config/loader.py): a mapping built in Python can be
# as deep or as large as a hostile file, and can also refer to itself.
from ..config.loader import MAX_DEPTH, MAX_NODES, merge_bases, numpy_scalar

_SCALARS = (str, bool, int, float, type(None))


class Config(dict):
    """A resolved, validated config: a ``dict`` of sections as the trainer sees them.

    ``source``: the file it was read from (None for a mapping); ``files``: every file read
    (the config and its ``_base_`` files), which no output of a run may overwrite. Change a
    value with ``load_config(..., opts=[...])`` rather than by assignment: options are checked,
    assignments only when the config is next used (``train`` validates it again)."""

    def __init__(self, data, source=None, files=()):
        super().__init__(data)
        self.source = source
        self.files = list(files)

    def to_dict(self):
        """A plain (deep) copy: what YAML dumps and the trainer mutates freely."""
        return plain_copy(self, "config")


def load_config(path_or_dict, opts=()):
    """The resolved config of a YAML file (a path) or of a mapping written in Python.

    ``opts``: overrides as ``up train --opts`` takes them (``["trainer.max_epoch=3",
    "hooks.grad_clipper.kwargs.max_norm=5"]``). A mapping may name ``_base_`` files
    (relative to the current directory). Raises :class:`ConfigError` for any mistake, with
    the key path in ``exc.path`` and the CLI's one-line message as ``str(exc)``."""
    from ..config import resolve_config, resolve_loaded

    opts = _checked_opts(opts)
    if isinstance(path_or_dict, Config):
        # Resolved already (its default hooks listed, UP's form translated): only the options
        # are applied, then everything is validated again (assignments made since included).
        from ..config import apply_opts, validate

        data = path_or_dict.to_dict()
        apply_opts(data, opts)
        return Config(validate(data), source=path_or_dict.source, files=path_or_dict.files)
    if isinstance(path_or_dict, (str, os.PathLike)):
        path = os.fspath(path_or_dict)
        files = []
        return Config(resolve_config(path, opts, files=files), source=path, files=files)
    if isinstance(path_or_dict, dict):
        data = plain_copy(path_or_dict, None)
        files = []
        data = merge_bases(data, "", "_base_", files=files)
        return Config(resolve_loaded(data, opts), source=None, files=files)
    raise ConfigError(None, f"expected a config file path or a mapping of sections, got "
                      f"{type(path_or_dict).__name__}")


def as_config(config, opts=()):
    """``config`` (a path, a mapping or a :class:`Config`) as a freshly validated Config."""
    return load_config(config, opts)


def _checked_opts(opts):
    if opts is None:
        return []
    if isinstance(opts, (str, bytes)) or not isinstance(opts, (list, tuple)):
        # a lone string would otherwise be read one character at a time
        raise ConfigError("opts", f"expected a list of KEY=VALUE strings, got {type(opts).__name__} "
                          f"{short_repr(opts)}")
    for i, opt in enumerate(opts):
        if not isinstance(opt, str):
            raise ConfigError(join_path("opts", i), f"expected a KEY=VALUE string, got {type(opt).__name__} "
                              f"{short_repr(opt)}")
    return list(opts)


def plain_copy(value, path):
    """A deep copy of ``value`` holding only what a YAML file can: mappings with string keys,
    lists (tuples become lists), strings, numbers, booleans, None. Anything else (an object, a
    tensor, a NaN key, a mapping that contains itself, nesting or size past the file limits)
    is a ConfigError naming its key path."""
    count = [0]

    def copy(v, p, depth, open_ids):
        count[0] += 1
        if count[0] > MAX_NODES:
            raise ConfigError(p, f"the config holds more than {MAX_NODES} values")
        if depth > MAX_DEPTH:
            raise ConfigError(p, f"the config is nested deeper than {MAX_DEPTH} levels")
        v = numpy_scalar(v)  # np.int64, np.float32, np.bool_, a 0-d array: their Python value
        if isinstance(v, _SCALARS):  # a NaN too: YAML has .nan, and the schema judges values
            # exact types (numpy.float64 is a float): YAML's safe dumper knows no subclass
            return next(t(v) for t in (bool, int, float, str) if isinstance(v, t)) if v is not None else None
        if isinstance(v, (dict, list, tuple)):
            if id(v) in open_ids:
                raise ConfigError(p, "the mapping contains itself (a reference cycle)")
            open_ids = open_ids | {id(v)}
            if isinstance(v, dict):
                out = {}
                for k, x in v.items():
                    if not isinstance(k, str):
                        raise ConfigError(p, f"keys must be strings, got {type(k).__name__} {short_repr(k)}")
                    out[k] = copy(x, join_path(p, k), depth + 1, open_ids)
                return out
            return [copy(x, join_path(p, i), depth + 1, open_ids) for i, x in enumerate(v)]
        raise ConfigError(p, f"a config holds plain values (str, int, float, bool, None, lists, mappings), got "
                          f"{type(v).__module__}.{type(v).__qualname__}")

    return copy(value, path, 0, frozenset())
