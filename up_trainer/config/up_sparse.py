"""UP's sparse runner (``runtime.runner: sparse``) and its ``sparsity`` section, translated into
the native ``sparsity`` section (up_trainer/sparsity/spec.py).

UP hands the section to MSBench: ``scheduler`` is AmpereScheduler (NVIDIA ASP: N:M masks
computed once from the loaded weights, gradients and weights masked at every step) or
AmbaLevelPruneScheduler (magnitude masks whose sparsity rises through ``sparsity_table``,
the run's iterations split evenly between the levels); ``mask_generator`` / ``fake_sparse``
name the magnitude mask and the mask multiply; ``leaf_module`` tells torch.fx what not to
trace. Each key is mapped, mapped with its deviation noted, or refused in one line. No torch
import here.
"""
import re

from ..errors import ConfigError, join_path, short_repr

AMPERE_KWARGS = ("mask_calculator", "allow_recompute_mask", "allow_permutation", "verbosity")
AMBA_KWARGS = ("total_iters", "sparsity_table", "no_prune_keyword", "no_prune_layer", "prun_algo",
               "prun_algo_tuning", "prun_hw_aware", "dw_no_prune", "do_sparse_analysis", "output_dir", "save_dir",
               "verbose")
SECTION_KEYS = ("scheduler", "mask_generator", "fake_sparse", "leaf_module")
# MSBench's other names, what they are, and why they do not map
REFUSED_SCHEDULERS = {
    "STRScheduler": "MSBench's soft-threshold reparameterization (learned per-layer thresholds)",
    "ProbMaskScheduler": "MSBench's probabilistic masks (learned keep probabilities)",
    "ADMMScheduler": "MSBench's ADMM pruning (an auxiliary constrained problem per step)",
}
MASK_1D = re.compile(r"m(\d+)n(\d+)_1d")


def _kwargs(scheduler, path):
    kwargs = scheduler.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigError(join_path(path, "kwargs"), f"expected a mapping, got {type(kwargs).__name__}")
    return kwargs


def _only(kwargs, known, path, what):
    for key in kwargs:
        if key not in known:
            raise ConfigError(join_path(path, key), f"is not a kwarg of UP's {what} mapped here",
                              f"known: {', '.join(known)}")


def _flag(kwargs, key, path, default=False):
    value = kwargs.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(join_path(path, key), f"expected bool, got {type(value).__name__} {short_repr(value)}")
    return value


def _ampere(kwargs, path, notes):
    _only(kwargs, AMPERE_KWARGS, path, "AmpereScheduler")
    calc = kwargs.get("mask_calculator", "m4n2_1d")
    match = MASK_1D.fullmatch(calc) if isinstance(calc, str) else None
    if match is None:
        raise ConfigError(join_path(path, "mask_calculator"), f"{short_repr(calc)} is not mapped: only ASP's 1-D "
                          "N:M masks (m<M>n<N>_1d) are built, not its 2-D block masks", "mask_calculator: m4n2_1d")
    block, kept = int(match.group(1)), int(match.group(2))
    if not 0 < kept < block:
        raise ConfigError(join_path(path, "mask_calculator"), f"{calc} keeps {kept} of {block} weights",
                          "N must be between 1 and M - 1 (m4n2_1d: 2 of 4)")
    if _flag(kwargs, "allow_permutation", path):
        raise ConfigError(join_path(path, "allow_permutation"), "ASP's input-channel permutation search (keeping "
                          "more weight magnitude under N:M) is not built", "allow_permutation: false")
    if _flag(kwargs, "allow_recompute_mask", path):
        notes.append("sparsity.scheduler.kwargs.allow_recompute_mask: true only keeps ASP's pruned values for a "
                     "later mask recomputation, which UP's sparse runner never asks for; masks are computed once")
    verbosity = kwargs.get("verbosity", 2)
    if isinstance(verbosity, bool) or not isinstance(verbosity, int) or not 0 <= verbosity <= 3:
        raise ConfigError(join_path(path, "verbosity"), f"expected ASP's 0-3, got {short_repr(verbosity)}")
    return {"scheduler": "semi_structured", "block_size": block, "zeros_per_block": block - kept,
            "verbose": verbosity >= 2}


def _percent_levels(value, path):
    if not isinstance(value, list) or not value or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) and 0 < s < 100 for s in value):
        raise ConfigError(path, f"expected a list of percentages in (0, 100), got {short_repr(value)}")
    return [s / 100 for s in value]


def _names(kwargs, path):
    out = []
    for key in ("no_prune_keyword", "no_prune_layer"):
        value = kwargs.get(key, "")
        if not isinstance(value, str):
            raise ConfigError(join_path(path, key), f"expected a comma-separated string, got {short_repr(value)}")
        out += [name.strip() for name in value.split(",") if name.strip()]
    return out


def _amba(kwargs, path, notes):
    _only(kwargs, AMBA_KWARGS, path, "AmbaLevelPruneScheduler")
    out = {"scheduler": "levels",
           "levels": _percent_levels(kwargs.get("sparsity_table", [30, 40, 50, 60, 70, 80, 90]),
                                     join_path(path, "sparsity_table")),
           "skip_depthwise": _flag(kwargs, "dw_no_prune", path), "verbose": _flag(kwargs, "verbose", path)}
    exclude = _names(kwargs, path)
    if exclude:
        out["exclude"] = exclude
    algo = kwargs.get("prun_algo", 1)
    if algo not in (0, 1) or isinstance(algo, bool):
        raise ConfigError(join_path(path, "prun_algo"), f"{short_repr(algo)} is not one of MSBench's 0 (one level "
                          "for every layer) or 1 (per-layer levels)")
    if algo == 1:
        notes.append("sparsity.scheduler.kwargs.prun_algo: 1 (per-layer levels decided by Ambarella's closed "
                     "core_sparse_ratio_decision program, with prun_algo_tuning) is not available; every masked "
                     "layer gets each stage's level, as prun_algo 0")
    if kwargs.get("prun_hw_aware"):
        raise ConfigError(join_path(path, "prun_hw_aware"), "Ambarella's hardware-aware level table is not built",
                          "leave prun_hw_aware empty")
    if _flag(kwargs, "do_sparse_analysis", path):
        raise ConfigError(join_path(path, "do_sparse_analysis"), "UP's sparse analysis runs Ambarella's closed "
                          "core_sparse_ratio_decision program, which is not available", "do_sparse_analysis: false")
    if kwargs.get("total_iters") not in (None, "None"):
        notes.append("sparsity.scheduler.kwargs.total_iters: ignored as in UP (its runner sets the run's iterations)")
    for key in ("output_dir", "save_dir"):
        if key in kwargs:
            notes.append(f"sparsity.scheduler.kwargs.{key}: not written; each checkpoint holds the weights and "
                         "masks of its level")
    notes.append("sparsity: UP restarts the LR schedule at every level; here it runs once over the whole run")
    return out


def _check_type(section, key, known, path):
    entry = section.get(key)
    if entry is None:
        return
    etype = entry.get("type") if isinstance(entry, dict) else entry
    if etype != known:
        raise ConfigError(join_path(join_path(path, key), "type"), f"{short_repr(etype)} is not mapped",
                          f"{known} (weight-magnitude masks multiplied into the weights)")


def _section(section, notes):
    path = "sparsity"
    if not isinstance(section, dict):
        raise ConfigError(path, f"expected a mapping, got {type(section).__name__}")
    for key in section:
        if key not in SECTION_KEYS:
            raise ConfigError(join_path(path, key), "is not read by UP's sparse runner",
                              f"known: {', '.join(SECTION_KEYS)}")
    _check_type(section, "mask_generator", "NormalMaskGenerator", path)
    _check_type(section, "fake_sparse", "FakeSparse", path)
    if "leaf_module" in section:
        notes.append("sparsity.leaf_module: torch.fx tracing hints; nothing is traced here, ignored")
    scheduler = section.get("scheduler")
    spath = join_path(path, "scheduler")
    if not isinstance(scheduler, dict) or not isinstance(scheduler.get("type"), str):
        raise ConfigError(spath, "expected {type: AmpereScheduler|AmbaLevelPruneScheduler, kwargs}")
    stype, kpath = scheduler["type"], join_path(spath, "kwargs")
    if stype == "AmpereScheduler":
        return _ampere(_kwargs(scheduler, spath), kpath, notes)
    if stype == "AmbaLevelPruneScheduler":
        return _amba(_kwargs(scheduler, spath), kpath, notes)
    what = REFUSED_SCHEDULERS.get(stype, "not an MSBench scheduler UP's files use")
    raise ConfigError(join_path(spath, "type"), f"UP's {stype} ({what}) is not mapped",
                      "AmpereScheduler (N:M) or AmbaLevelPruneScheduler (levels)")


# UP's sparse heads -> the head they subclass. UP's constructors pass these constants to the
# base head whatever the file says, so the file's values are replaced by them.
SPARSE_HEADS = {"sparse_base_cls_head": "base_cls_head", "sparse_convnext_head": "convnext_head"}
SPARSE_HEAD_FIXED = {"sparse_base_cls_head": {"input_feature_idx": -1, "use_pool": True, "dropout": None},
                     "sparse_convnext_head": {"use_pool": True, "dropout": None}}


def _sparse_heads(cfg, notes):
    net = cfg.get("net")
    for i, part in enumerate(net if isinstance(net, list) else []):
        if not isinstance(part, dict) or part.get("type") not in SPARSE_HEADS:
            continue
        utype, kwargs = part["type"], part.get("kwargs")
        part["type"] = SPARSE_HEADS[utype]
        if isinstance(kwargs, dict):
            for key, value in SPARSE_HEAD_FIXED[utype].items():
                if key in kwargs and kwargs[key] != value:
                    notes.append(f"net[{i}].kwargs.{key}: {short_repr(kwargs[key])} replaced by {short_repr(value)} "
                                 f"as UP's {utype} does")
                kwargs.pop(key, None)
        notes.append(f"net[{i}].type: {utype} (UP: {SPARSE_HEADS[utype]} with fixed pooling) -> "
                     f"{SPARSE_HEADS[utype]}")


def translate_sparse(cfg, runner, notes):
    """UP's sparse runner: its ``sparsity`` section rewritten into ours (in place); returns the
    runner left for the next step (None when it was ``sparse``). Under any other runner UP
    never reads ``sparsity``: dropped, and said so. UP's sparse heads become the heads they
    extend under any runner."""
    _sparse_heads(cfg, notes)
    if runner != "sparse":
        if "sparsity" in cfg:
            cfg.pop("sparsity")
            notes.append("sparsity: ignored as in UP (only runtime.runner: sparse reads it)")
        return runner
    if "sparsity" not in cfg:
        raise ConfigError("sparsity", "runtime.runner sparse needs a sparsity section",
                          "UP's configs/sparse files show it")
    cfg["sparsity"] = _section(cfg["sparsity"], notes)
    ema = cfg.get("ema")
    if isinstance(ema, dict) and ema.get("enable"):
        cfg.pop("ema")
        notes.append("ema: ignored as in UP (its sparse runner turns EMA off during sparse training)")
    notes.append(f"runtime.runner: sparse -> sparsity.scheduler: {cfg['sparsity']['scheduler']}")
    return None
