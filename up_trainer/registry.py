"""One Registry class for everything built by type name from YAML.

Providers (the modules whose import registers the built-in entries) are imported on the
first lookup, so ``up --help`` never imports torch. User code joins through
``runtime.imports: [my_pkg.hooks]`` or the ``up_trainer.plugins`` entry-point group.
"""
import importlib
import inspect
import typing

from .config.redact import is_secret_key
from .errors import ConfigError, did_you_mean, join_path, short_repr

ENTRY_POINT_GROUP = "up_trainer.plugins"
_plugins_loaded = False


def load_plugins():
    """Import every module advertised in the ``up_trainer.plugins`` entry-point group once."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


def import_user_modules(modules, path="runtime.imports"):
    """Import ``runtime.imports`` so their ``@REGISTRY.register`` decorators run."""
    for i, name in enumerate(modules or []):
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(join_path(path, i), f"expected a module name like my_pkg.hooks, got "
                              f"{type(name).__name__} {short_repr(name)}")
        if not all(part.isidentifier() for part in name.split(".")):  # '..foo', 'a..b', 'my-pkg'
            raise ConfigError(join_path(path, i), f"{short_repr(name)} is not an absolute module name "
                              "(dotted Python identifiers, like my_pkg.hooks)")
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(join_path(path, i), f"cannot import module {name!r}: {exc}") from None
        except ConfigError as exc:  # its registrations clash with others
            raise ConfigError(join_path(path, i), f"module {name!r}: {exc.message}", exc.hint) from None


def _qualname(obj):
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


_ALL = []  # every Registry: which kind a class belongs to, for the leftover-argument message


class Registry:
    def __init__(self, kind, providers=(), entry_keys=("type", "kwargs")):
        self.kind = kind  # "hook", "model", ... used in messages
        self.entry_keys = tuple(entry_keys)  # the keys a YAML entry of this kind may have
        self._providers = list(providers)
        self._entries = {}
        self._aliases = {}
        _ALL.append(self)

    # -- registration ------------------------------------------------------------------
    def register(self, name=None, aliases=()):
        """Decorator: ``@HOOKS.register('grad_clipper')``."""

        def wrap(obj):
            key = name or obj.__name__
            if key in self._entries and self._entries[key] is not obj:  # a plugin's name taken: one line, not a traceback
                raise ConfigError(None, f"{self.kind} {key!r} is registered twice: by {_qualname(self._entries[key])} "
                                  f"and by {_qualname(obj)}", "give the plugin's entry another name")
            self._entries[key] = obj
            for alias in aliases:
                self._aliases[alias] = key
            return obj

        return wrap

    def _load(self):
        while self._providers:
            module = self._providers.pop(0)
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name != module:  # a provider that exists but fails to import is a bug
                    raise
        load_plugins()

    # -- lookup -------------------------------------------------------------------------
    def names(self):
        self._load()
        return sorted(self._entries)

    def __contains__(self, name):
        self._load()
        return name in self._entries or name in self._aliases

    def get(self, name, path=None):
        if not isinstance(name, str):
            raise ConfigError(path, f"expected a {self.kind} type name, got {type(name).__name__} {short_repr(name)}")
        self._load()
        name = self._aliases.get(name, name)
        if name in self._entries:
            return self._entries[name]
        choices = sorted(set(self._entries) | set(self._aliases))
        hint = did_you_mean(name, choices)
        msg = f"unknown {self.kind} type {name!r}"
        if hint:
            msg += f"; {hint}"
        raise ConfigError(path, msg, f"known: {', '.join(choices)}")

    # -- building -------------------------------------------------------------------------
    def build(self, cfg, path="", **extra):
        """Build ``{type, kwargs}``. ``extra`` are keyword arguments supplied by the program
        (e.g. the number of classes), not by the user; they are not checked against the YAML."""
        if not isinstance(cfg, dict):
            raise ConfigError(path, f"expected a mapping with 'type' and 'kwargs', got {type(cfg).__name__}")
        unknown = set(cfg) - set(self.entry_keys)
        if unknown:
            key = sorted(map(str, unknown))[0]
            raise ConfigError(join_path(path, key), "unknown key",
                              did_you_mean(key, self.entry_keys) or f"a {self.kind} entry has {', '.join(self.entry_keys)}")
        if "type" not in cfg:
            raise ConfigError(path, "missing 'type'")
        obj = self.get(cfg["type"], join_path(path, "type"))
        kwargs = cfg.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise ConfigError(join_path(path, "kwargs"), f"expected a mapping, got {type(kwargs).__name__}")
        kwpath = join_path(path, "kwargs")
        check_kwargs(obj, kwargs, kwpath, provided=set(extra))
        try:
            return obj(**kwargs, **extra)
        except ConfigError as exc:
            # Constructors raise ConfigError with a path relative to their kwargs.
            raise ConfigError(join_path(kwpath, exc.path) if exc.path else kwpath, exc.message, exc.hint) from None
        except ValueError as exc:
            raise ConfigError(kwpath, str(exc)) from None


def leftover_argument(obj, key, path):
    """The error for ``key``, which ``obj`` does not take while another type of the same kind
    does: most likely left over from the type the entry had before (``--opts
    dataset.train.type=voc`` on a coco entry keeps its ``ann_file``). None otherwise."""
    for registry in _ALL:
        names = [n for n, entry in registry._entries.items() if entry is obj]
        if not names:
            continue
        owners = [n for n, entry in registry._entries.items() if entry is not obj and key in _param_names(entry)]
        if owners:
            shown = ", ".join(owners[:4]) + (", ..." if len(owners) > 4 else "")
            own = ", ".join(n for n, _ in public_params(obj)) or "none"
            return ConfigError(path, f"{names[0]} takes no {key!r}: that is an argument of {shown}, left over from "
                               "the type this entry had before?", f"remove it, or replace it with {names[0]}'s own: {own}")
    return None


def _param_names(obj):
    try:
        return {n for n, _ in public_params(obj)}
    except (TypeError, ValueError):  # a builtin without a readable signature
        return set()


def signature_of(obj):
    return inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)


def public_params(obj):
    """(name, Parameter) pairs a user may set, without self/*args/**kwargs."""
    out = []
    for name, p in signature_of(obj).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append((name, p))
    return out


_SIMPLE_TYPES = {int: (int,), float: (int, float), bool: (bool,), str: (str,), list: (list, tuple), dict: (dict,)}


def _accepted_types(annotation):
    """Python types a YAML value may have for this annotation, or None when unchecked."""
    if annotation in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[annotation]
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        return (list, tuple)
    if origin is dict:
        return (dict,)
    if origin is typing.Union:
        accepted = []
        for arg in typing.get_args(annotation):
            if arg is type(None):
                accepted.append(type(None))
                continue
            sub = _accepted_types(arg)
            if sub is None:
                return None
            accepted.extend(sub)
        return tuple(accepted)
    return None


def _type_ok(value, accepted):
    if isinstance(value, bool) and bool not in accepted:
        return False  # YAML `true` is not a number
    return isinstance(value, accepted)


def check_kwargs(obj, kwargs, path, provided=()):
    """Compare YAML kwargs with the constructor signature before constructing anything."""
    sig = signature_of(obj)
    params = dict(public_params(obj))
    has_var_kw = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    try:
        hints = typing.get_type_hints(obj.__init__ if inspect.isclass(obj) else obj)
    except Exception:  # unresolvable forward references: skip type checks
        hints = {}
    for key, value in kwargs.items():
        if key not in params:
            if has_var_kw:
                continue
            leftover = leftover_argument(obj, key, join_path(path, key))
            if leftover is not None:
                raise leftover
            raise ConfigError(join_path(path, key), "unknown argument",
                              did_you_mean(key, params) or f"accepted: {', '.join(params) or 'none'}")
        accepted = _accepted_types(hints.get(key))
        if value is None and params[key].default is None:
            continue  # `key: null` restores a None default, whatever the annotation says
        if accepted is not None and not _type_ok(value, accepted):
            names = "/".join(sorted({t.__name__ for t in accepted}))
            shown = "" if is_secret_key(key) else f" {short_repr(value)}"  # never quote a token
            raise ConfigError(join_path(path, key), f"expected {names}, got {type(value).__name__}{shown}")
    for key, p in params.items():
        if p.default is p.empty and key not in kwargs and key not in provided:
            raise ConfigError(join_path(path, key), "required argument is missing")


HOOKS = Registry("hook", ["up_trainer.hooks"], entry_keys=("type", "kwargs", "priority", "name"))
MODELS = Registry("model", ["up_trainer.tasks.cls.models", "up_trainer.tasks.det.models",
                             "up_trainer.tasks.det.yolox", "up_trainer.tasks.det.atss",
                             "up_trainer.tasks.ssl.models",
                             "up_trainer.tasks.det.yolov5",
                             "up_trainer.tasks.det.fcos",
                             "up_trainer.tasks.det.onenet",
                             "up_trainer.tasks.det.yolov6",
                             "up_trainer.tasks.det.rcnn"])
DATASETS = Registry("dataset", ["up_trainer.tasks.cls.datasets", "up_trainer.tasks.det.datasets",
                                "up_trainer.tasks.det.digits_det", "up_trainer.tasks.det.format_datasets",
                                "up_trainer.tasks.det.lvis_dataset",
                                "up_trainer.tasks.cls.csv_dataset", "up_trainer.tasks.cls.meta_dataset",
                                "up_trainer.data.split_list"])
EVALUATORS = Registry("evaluator", ["up_trainer.tasks.cls.evaluator", "up_trainer.tasks.det.evaluator",
                                    "up_trainer.tasks.det.lvis_evaluator"])
TRANSFORMS = Registry("transform", ["up_trainer.tasks.transforms", "up_trainer.tasks.det.transforms",
                                    "up_trainer.tasks.det.yolox.transforms", "up_trainer.tasks.det.mix_transforms",
                                    "up_trainer.tasks.det.improve_transforms", "up_trainer.tasks.rand_augment_incre",
                                    "up_trainer.tasks.det.onenet.transforms",
                                    "up_trainer.tasks.ssl.views"])
# The backbones a pretraining net (tasks/ssl) is built on: ``build(kwargs, path) -> Encoder``.
SSL_BACKBONES = Registry("pretraining backbone", ["up_trainer.tasks.up_nets.ssl_backbones"])
WRITERS = Registry("summary writer", ["up_trainer.writers"])
LR_SCHEDULERS = Registry("lr scheduler", ["up_trainer.engine.lr_schedulers", "up_trainer.engine.up_lr_schedulers"])
BATCH_FNS = Registry("batch_fn", ["up_trainer.data.batching"])
IMAGE_READERS = Registry("image reader", ["up_trainer.data.readers"])
# A detector family's export graph, keyed by the model's ``kind``: a module class built as
# ``cls(model, height, width, dynamic)`` with ``two_stage`` and ``preprocess`` attributes
# (up_trainer/export/dense.py, two_stage.py; docs/layout.rst, Adding a detector family).
EXPORTERS = Registry("exporter", ["up_trainer.export.dense", "up_trainer.export.two_stage"])
