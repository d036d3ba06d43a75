"""``distill.adapt``: UP's ``ADAP`` net parts, read. An adapt part is a list of convolutions
(3x3 or 1x1, a ReLU after each with ``with_relu``), one per chosen level of a student part's
output maps (``on: neck`` the FPN levels, ``on: backbone`` the backbone stages). It runs in the
student's training forward only, beside the part it reads; mimic jobs name its convs like any
student module (``neck_adapt.conv.0.0``), and DeFeat reads the ``adapt_neck_features`` part's
outputs as the student's neck maps. Its weights train with the student and are left out of
the model ``up eval`` / ``predict`` / ``export`` build. No torch import here.
"""
from dataclasses import dataclass

from ..errors import ConfigError, did_you_mean, join_path

ADAPT_KEYS = ("name", "on", "levels", "outplanes", "kernel_size", "with_relu", "small_init", "out_name")
OUT_NAMES = ("adapt_neck_features", "adapt_bb_features")  # UP's two; DeFeat reads the first


@dataclass
class AdaptSpec:
    name: str
    on: str  # the student part whose output maps it reads
    levels: list
    outplanes: list  # one per level
    kernel_size: int
    with_relu: bool
    small_init: bool  # UP's do_init_weights: normal(0, 1) clipped to +-2, times 1e-4
    out_name: str
    path: str


def _read(entry, path, index):
    if not isinstance(entry, dict):
        raise ConfigError(path, f"expected a mapping, got {type(entry).__name__}")
    for key in entry:
        if key not in ADAPT_KEYS:
            raise ConfigError(join_path(path, key), "unknown key", did_you_mean(key, ADAPT_KEYS) or
                              f"known keys: {', '.join(ADAPT_KEYS)}")
    name = entry.get("name", f"adapt{index}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(join_path(path, "name"), f"{name!r} cannot name an adapt part", "use an identifier")
    on = entry.get("on")
    if not isinstance(on, str) or not on:
        raise ConfigError(join_path(path, "on"), "required: the student part whose maps it reads (neck, backbone)")
    levels = entry.get("levels")
    if not isinstance(levels, list) or not levels or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in levels):
        raise ConfigError(join_path(path, "levels"), f"expected a non-empty list of level indices, got {levels!r}")
    planes = entry.get("outplanes")
    if isinstance(planes, int) and not isinstance(planes, bool):
        planes = [planes] * len(levels)
    if not isinstance(planes, list) or len(planes) != len(levels) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in planes):
        raise ConfigError(join_path(path, "outplanes"), f"expected a channel count > 0 or one per level "
                          f"({len(levels)}), got {planes!r}")
    kernel = entry.get("kernel_size", 3)
    if kernel not in (1, 3):
        raise ConfigError(join_path(path, "kernel_size"), f"expected 1 or 3, got {kernel!r}")
    flags = {}
    for key, default in (("with_relu", False), ("small_init", False)):
        flags[key] = entry.get(key, default)
        if not isinstance(flags[key], bool):
            raise ConfigError(join_path(path, key), f"expected true or false, got {flags[key]!r}")
    out_name = entry.get("out_name", OUT_NAMES[0])
    if out_name not in OUT_NAMES:
        raise ConfigError(join_path(path, "out_name"), f"{out_name!r} is not one of {', '.join(OUT_NAMES)}")
    return AdaptSpec(name, on, list(levels), list(planes), kernel, flags["with_relu"], flags["small_init"],
                     out_name, path)


def read_adapt_parts(value, path):
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list of adapt parts, got {type(value).__name__}")
    parts = [_read(e, join_path(path, i), i) for i, e in enumerate(value)]
    seen = set()
    for p in parts:
        if p.name in seen:
            raise ConfigError(join_path(p.path, "name"), f"a second adapt part is named {p.name!r}")
        seen.add(p.name)
    return parts
