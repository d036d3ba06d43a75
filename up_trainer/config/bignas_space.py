"""UP's BigNAS search space and one subnet chosen from it, read without torch.

A supernet part (``big_resnet_basic``, ``big_fpn``, ``BigRetinaHeadWithBN``) gives each
searched element (``depth``, ``out_channel``, ``kernel_size``, ``expand_ratio``) either as a
fixed list (one value per stage) or as ``{space: {min, max, stride | dynamic_range},
sample_strategy}``: per stage, the values ``min, min + stride, ..., max`` (or the listed
``dynamic_range``). ``bignas.subnet.subnet_settings`` names one point of that space, one value
per stage; an element it leaves out takes the largest value, as UP's controller does.
:func:`choose` checks a setting against the space and returns the per-stage values; every
value outside the space is refused in one line naming it.
"""
from ..errors import ConfigError, join_path

ELEMENTS = ("depth", "out_channel", "kernel_size", "expand_ratio")


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _per_stage(value, stages, path, what):
    """``value`` as a list of ``stages`` numbers (an int is repeated, as UP's int2list does)."""
    if _number(value):
        return [value] * stages
    if not isinstance(value, list) or len(value) != stages or not all(_number(v) for v in value):
        raise ConfigError(path, f"expected {what}: {stages} numbers, got {value!r}")
    return list(value)


def read_element(value, path):
    """The allowed values of one element, per stage: a list of lists (a fixed list allows its
    own values only)."""
    if isinstance(value, list):
        if not value or not all(_number(v) for v in value):
            raise ConfigError(path, f"expected a list of numbers (one per stage), got {value!r}")
        return [[v] for v in value]
    if not isinstance(value, dict) or not isinstance(value.get("space"), dict):
        raise ConfigError(path, f"expected a list or {{space: {{min, max, stride}}, sample_strategy}}, got {value!r}")
    extra = set(value) - {"space", "sample_strategy"}
    if extra:
        raise ConfigError(join_path(path, sorted(extra)[0]), "unknown key", "a search element has space, "
                          "sample_strategy")
    space, spath = value["space"], join_path(path, "space")
    extra = set(space) - {"min", "max", "stride", "dynamic_range", "middle"}
    if extra:
        raise ConfigError(join_path(spath, sorted(extra)[0]), "unknown key", "a space has min, max, stride "
                          "(or dynamic_range)")
    for key in ("min", "max"):
        if not isinstance(space.get(key), list) or not space[key]:
            raise ConfigError(join_path(spath, key), "required list is missing")
    lo = _per_stage(space["min"], len(space["min"]), join_path(spath, "min"), "one value per stage")
    hi = _per_stage(space["max"], len(lo), join_path(spath, "max"), "one value per stage, as min")
    if space.get("dynamic_range") is not None:
        ranges = space["dynamic_range"]
        if not isinstance(ranges, list) or len(ranges) != len(lo) or not all(
                isinstance(r, list) and r and all(_number(v) for v in r) for r in ranges):
            raise ConfigError(join_path(spath, "dynamic_range"), f"expected {len(lo)} lists of numbers")
        return [list(r) for r in ranges]
    if lo == hi:
        return [[v] for v in hi]
    if space.get("stride") is None:
        raise ConfigError(join_path(spath, "stride"), "required when min and max differ (or give dynamic_range)")
    strides = _per_stage(space["stride"], len(lo), join_path(spath, "stride"), "one stride per stage")
    allowed = []
    for i, (a, b, s) in enumerate(zip(lo, hi, strides)):
        if s <= 0 or a > b:
            raise ConfigError(join_path(spath, "stride" if s <= 0 else "min"), f"stage {i}: no values between "
                              f"min {a} and max {b} by stride {s}")
        values, v = [], a
        while v <= b + 1e-9:
            values.append(round(v, 6) if isinstance(v, float) else v)
            v += s
        allowed.append(values)
    return allowed


def choose(space, setting, path):
    """The per-stage values of ``setting`` (or the largest ones when None), each checked
    against ``space`` (from :func:`read_element`)."""
    if setting is None:
        return [max(values) for values in space]
    if not isinstance(setting, list):
        raise ConfigError(path, f"expected a list (one value per stage), got {setting!r}")
    if len(setting) != len(space):
        raise ConfigError(path, f"{len(setting)} values but the supernet has {len(space)} stages",
                          "one value per stage")
    for i, (value, values) in enumerate(zip(setting, space)):
        if not _number(value):
            raise ConfigError(join_path(path, i), f"expected a number, got {value!r}")
        if not any(abs(value - v) < 1e-6 for v in values):
            if len(values) > 1 and min(values) <= value <= max(values):
                where = f"the supernet's values for stage {i} are {values}"
            else:
                where = f"the supernet's stage {i} spans {min(values)}..{max(values)}"
            raise ConfigError(join_path(path, i), f"{value} is not in the search space", where)
    return list(setting)


def choose_part(elements, setting, path, part_path):
    """{element: per-stage values} of one part: ``elements`` maps each element the part
    searches to its kwargs value (read with :func:`read_element`); ``setting`` is the part's
    subnet setting (a mapping or None)."""
    if setting is None:
        setting = {}
    if not isinstance(setting, dict):
        raise ConfigError(path, f"expected a mapping of {', '.join(elements)}, got {setting!r}")
    for key in setting:
        if key not in elements:
            raise ConfigError(join_path(path, key), f"{part_path} does not search {key!r}",
                              f"it searches: {', '.join(elements)}")
    return {name: choose(read_element(value, join_path(part_path, name)), setting.get(name), join_path(path, name))
            for name, value in elements.items()}


UNITS = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_flops(value, path):
    """UP's FLOP counts: ``'200G'`` -> 2e11 (K, M, G, T; a number passes as it is)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if isinstance(value, str) and value[-1:].upper() in UNITS:
        try:
            number = float(value[:-1])
        except ValueError:
            number = -1.0
        if number >= 0:
            return number * UNITS[value[-1].upper()]
    raise ConfigError(path, f"expected a count such as '200G' (K, M, G, T), got {value!r}")


def read_sampling_keys(subnet, path):
    """(subnet_count, (low, high) or None) of UP's ``subnet_count`` / ``flops_range``."""
    count = subnet.get("subnet_count", 100)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 100000:
        raise ConfigError(join_path(path, "subnet_count"), f"expected a whole number 1..100000, got {count!r}")
    span = subnet.get("flops_range")
    if span is not None:
        if not isinstance(span, list) or len(span) != 2:
            raise ConfigError(join_path(path, "flops_range"), f"expected [low, high], got {span!r}")
        span = tuple(parse_flops(v, join_path(join_path(path, "flops_range"), i)) for i, v in enumerate(span))
        if span[0] > span[1]:
            raise ConfigError(join_path(path, "flops_range"), f"{subnet['flops_range']}: low above high")
    if "baseline_flops" in subnet and subnet["baseline_flops"] is not None:
        parse_flops(subnet["baseline_flops"], join_path(path, "baseline_flops"))
    return count, span
