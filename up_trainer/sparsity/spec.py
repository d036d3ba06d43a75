"""The native ``sparsity`` section, read into one record with every key path checked.

::

    sparsity:
      scheduler: semi_structured   # semi_structured: N:M masks computed once (UP's AmpereScheduler)
                                   # levels: magnitude masks at rising levels (UP's AmbaLevelPruneScheduler)
      block_size: 4                # semi_structured: consecutive weights along the input dimension per group
      zeros_per_block: 2           # semi_structured: weights zeroed in each group (2 of 4: NVIDIA's 2:4)
      levels: [0.3, 0.4, 0.5]      # levels: fraction zeroed in each masked layer, one per stage; the stages
                                   # share the iterations from start_epoch to the end evenly
      start_epoch: 1               # the masks are first computed at the start of this epoch (dense before)
      exclude: []                  # module names containing any of these stay dense (UP's no_prune_*)
      skip_depthwise: false        # depthwise convolutions stay dense (UP's dw_no_prune)
      verbose: false               # log every masked layer when its masks are computed

No torch import here: ``up config`` reads this before anything is built.
"""
from dataclasses import dataclass, field

from ..errors import ConfigError, did_you_mean, join_path, short_repr

SCHEDULERS = ("semi_structured", "levels")
KEYS = ("scheduler", "block_size", "zeros_per_block", "levels", "start_epoch", "exclude", "skip_depthwise",
        "verbose")
# keys that only one scheduler reads: given to the other they would silently do nothing
ONLY_FOR = {"block_size": "semi_structured", "zeros_per_block": "semi_structured", "levels": "levels"}


@dataclass
class SparsitySpec:
    scheduler: str = "semi_structured"
    block_size: int = 4
    zeros_per_block: int = 2
    levels: list = field(default_factory=list)
    start_epoch: int = 1
    exclude: list = field(default_factory=list)
    skip_depthwise: bool = False
    verbose: bool = False

    def describe(self):
        if self.scheduler == "semi_structured":
            kept = self.block_size - self.zeros_per_block
            return f"{kept}:{self.block_size} semi-structured masks (fixed from epoch {self.start_epoch})"
        return (f"magnitude masks at levels {', '.join(f'{s:g}' for s in self.levels)} "
                f"(from epoch {self.start_epoch})")


def _int(value, path, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"expected int, got {type(value).__name__} {short_repr(value)}")
    if value < minimum:
        raise ConfigError(path, f"must be >= {minimum}, got {value}")
    return value


def _bool(value, path):
    if not isinstance(value, bool):
        raise ConfigError(path, f"expected bool, got {type(value).__name__} {short_repr(value)}")
    return value


def _levels(value, path):
    if not isinstance(value, list) or not value:
        raise ConfigError(path, f"expected a non-empty list of fractions in (0, 1), got {short_repr(value)}")
    out = []
    for i, s in enumerate(value):
        p = join_path(path, i)
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 < s < 1:
            raise ConfigError(p, f"expected a fraction in (0, 1), got {short_repr(s)}", "0.5 zeroes half the weights")
        if out and s < out[-1]:
            raise ConfigError(p, f"{s:g} is below the level before it ({out[-1]:g})",
                              "levels rise: a zeroed weight stays zero")
        out.append(float(s))
    return out


def _names(value, path):
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise ConfigError(path, f"expected a list of module-name parts (non-empty strings), got {short_repr(value)}")
    return list(value)


def read_sparsity(section, path="sparsity"):
    """The checked :class:`SparsitySpec` of a ``sparsity`` mapping."""
    if not isinstance(section, dict):
        raise ConfigError(path, f"expected a mapping, got {type(section).__name__}")
    for key in section:
        if key not in KEYS:
            raise ConfigError(join_path(path, key), "unknown key",
                              did_you_mean(key, KEYS) or f"known: {', '.join(KEYS)}")
    spec = SparsitySpec()
    scheduler = section.get("scheduler", spec.scheduler)
    if scheduler not in SCHEDULERS:
        hint = did_you_mean(scheduler, SCHEDULERS) if isinstance(scheduler, str) else None
        raise ConfigError(join_path(path, "scheduler"), f"unknown scheduler {short_repr(scheduler)}",
                          hint or f"use one of {', '.join(SCHEDULERS)}")
    spec.scheduler = scheduler
    for key, wanted in ONLY_FOR.items():
        if key in section and wanted != scheduler:
            raise ConfigError(join_path(path, key), f"is read by scheduler {wanted} only, not {scheduler}")
    if "block_size" in section:
        spec.block_size = _int(section["block_size"], join_path(path, "block_size"), 2)
    if "zeros_per_block" in section:
        spec.zeros_per_block = _int(section["zeros_per_block"], join_path(path, "zeros_per_block"), 1)
    if spec.scheduler == "semi_structured" and spec.zeros_per_block >= spec.block_size:
        raise ConfigError(join_path(path, "zeros_per_block"), f"{spec.zeros_per_block} zeros leave nothing of a block "
                          f"of {spec.block_size}", "2 of 4 is NVIDIA's 2:4 pattern")
    if scheduler == "levels":
        if "levels" not in section:
            raise ConfigError(join_path(path, "levels"), "required key is missing for scheduler levels",
                              "e.g. levels: [0.3, 0.5]")
        spec.levels = _levels(section["levels"], join_path(path, "levels"))
    if "start_epoch" in section:
        spec.start_epoch = _int(section["start_epoch"], join_path(path, "start_epoch"), 1)
    if "exclude" in section:
        spec.exclude = _names(section["exclude"], join_path(path, "exclude"))
    for key in ("skip_depthwise", "verbose"):
        if key in section:
            setattr(spec, key, _bool(section[key], join_path(path, key)))
    return spec


def spec_of(cfg):
    """The run's SparsitySpec, or None when the config has no ``sparsity`` section."""
    section = cfg.get("sparsity")
    return None if section is None else read_sparsity(section)
