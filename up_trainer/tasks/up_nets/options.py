"""Read a UP part's kwargs so that every key is either honoured or named in one error line.

``opts = Options(kwargs, "net[0].kwargs")``; each ``opts.take(...)`` consumes one key and
checks its type; :meth:`Options.done` then fails on the first key nobody consumed. A value
we honour only in one setting (UP's ``style: pytorch``) is taken with ``only=``.
"""
from ...errors import ConfigError, did_you_mean, join_path

_MISSING = object()
_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a mapping", type(None): "null"}


class Options:
    def __init__(self, kwargs, path, what):
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict):
            raise ConfigError(path, f"expected a mapping, got {type(kwargs).__name__}")
        self.kwargs, self.path, self.what = dict(kwargs), path, what
        self.known = []

    def at(self, key):
        return join_path(self.path, key)

    def take(self, key, default=_MISSING, types=None, only=_MISSING, why=None, check=None):
        """The value of ``key`` (``default`` when absent; required when no default).

        ``types``: accepted Python types (int also passes for float). ``only``: the one
        value we can honour; any other is refused with ``why``. ``check(value)`` returns an
        error message or None.
        """
        self.known.append(key)
        if key not in self.kwargs:
            if default is _MISSING:
                raise ConfigError(self.at(key), f"required by UP's {self.what}")
            return default
        value = self.kwargs.pop(key)
        if types is not None:
            types = types if isinstance(types, tuple) else (types,)
            ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
            ok = ok or (float in types and isinstance(value, int) and not isinstance(value, bool))
            if not ok:
                names = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
                raise ConfigError(self.at(key), f"expected {names}, got {value!r}")
        if only is not _MISSING and value != only:
            raise ConfigError(self.at(key), f"{value!r} is not supported for UP's {self.what}; only {only!r}",
                              why)
        if check is not None:
            problem = check(value)
            if problem:
                raise ConfigError(self.at(key), problem)
        return value

    def ignore(self, key, why):
        """A key with no effect here (documented): consumed, value unchecked."""
        self.known.append(key)
        self.kwargs.pop(key, None)

    def done(self):
        for key in self.kwargs:
            hint = did_you_mean(key, self.known) or (f"{self.what} takes: {', '.join(self.known)}"
                                                     if self.known else f"{self.what} takes no kwargs")
            raise ConfigError(self.at(key), f"UP kwarg not supported by our {self.what}", hint)


def sub_options(opts, key, what, default=None):
    """Options over a nested ``{type, kwargs}`` mapping (or ``default`` when absent):
    returns (type, Options over its kwargs) or (None, None)."""
    value = opts.take(key, default, types=(dict, type(None)))
    if value is None:
        return None, None
    path = opts.at(key)
    extra = [k for k in value if k not in ("type", "kwargs")]
    if extra:
        raise ConfigError(join_path(path, extra[0]), "unknown key", "expected {type, kwargs}")
    if "type" not in value:
        raise ConfigError(join_path(path, "type"), "required key is missing")
    return value["type"], Options(value.get("kwargs"), join_path(path, "kwargs"), f"{what} {value['type']!r}")


def _sub(self, key):
    """Options over a nested plain mapping ``key`` (required)."""
    from ...errors import join_path

    value = self.take(key, types=dict)
    return Options(value, join_path(self.path, key), f"{self.what} {key}")


Options.sub = _sub


# -- the readers' shared steps (every UP net reader: det_readers, fcos_net, rcnn_net, atss_net,
# yolox_net); one wording for each refusal ----------------------------------------------------
def entry_options(net_cfg, path):
    """One :class:`Options` per entry of a UP net list, over its kwargs."""
    return [Options(e.get("kwargs"), join_path(join_path(path, i), "kwargs"), e["type"]) for i, e in enumerate(net_cfg)]


def typed_part(opts, key, allowed, what, family=None, default=None):
    """(type, Options over its kwargs) of the nested ``{type, kwargs}`` at ``key``, whose type
    must be one of ``allowed`` (mapped ``for {family}``, or here at all)."""
    kind, kw = sub_options(opts, key, what, default=default)
    if kind is None:
        raise ConfigError(opts.at(key), f"required by UP's {opts.what}")
    if kind not in allowed:
        where = f"for {family}" if family else "here"
        raise ConfigError(opts.at(f"{key}.type"), f"UP {what} {kind!r} is not mapped {where}",
                          f"supported: {', '.join(allowed)}")
    return kind, kw


def loss_weight(kw, fixed_why=None):
    """A UP loss's ``loss_weight`` (only 1.0 when ``fixed_why`` says why), its mean reduction
    and its log name."""
    weight = kw.take("loss_weight", 1.0, types=float)
    if fixed_why and weight != 1.0:
        raise ConfigError(kw.at("loss_weight"), fixed_why, "use 1.0")
    kw.take("reduction", "mean", types=str, only="mean")
    kw.ignore("name", "a log label")
    return weight


def same_value(opts, key, value, why):
    """``key`` may only be ``value`` (what the built part already is)."""
    opts.take(key, value, types=type(value), only=value, why=why)


def read_num_classes(opts, key="num_classes"):
    """UP's class count, which counts the background."""
    return opts.take(key, types=int, check=lambda v: None if v >= 2 else "counts the background too: at least 2")


def read_activation_name(opts, family, default):
    """UP's ``act_fn: {type, kwargs}`` of a YOLOv5 / YOLOv6 part (``default`` type when absent) as
    the native name: hardswish, relu, silu or leakyrelu (UP's slope 0.1)."""
    kind, kw = sub_options(opts, "act_fn", "activation", default={"type": default})
    key = str(kind).lower().replace("_", "")
    if key not in ("hardswish", "relu", "silu", "leakyrelu"):
        raise ConfigError(opts.at("act_fn.type"), f"UP activation {kind!r} is not mapped for {family}",
                          "supported: Hardswish, ReLU, Silu, LeakyReLU")
    kw.ignore("inplace", "no effect on the values")
    kw.done()
    return key


def read_activation(opts, family, default):
    """The constructor of the activation :func:`read_activation_name` reads."""
    from functools import partial

    from torch import nn

    acts = {"hardswish": nn.Hardswish, "relu": nn.ReLU, "silu": nn.SiLU, "leakyrelu": partial(nn.LeakyReLU, 0.1)}
    return acts[read_activation_name(opts, family, default)]
