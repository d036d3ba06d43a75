"""The ``dataset.repeat_factor`` section checked at config time (the sampler itself lives in
data/repeat_factor.py, a layer the config layer does not import)."""
from ..errors import ConfigError

RI_MODE_NAMES = ("floor", "round", "ceil")
KEYS = ("t", "pn", "ri_mode", "ri_if_empty", "static_size")


def check_repeat_factor(cfg, path="dataset.repeat_factor"):
    """{t, pn, ri_mode, ri_if_empty} with UP's defaults filled in, or a one-line error."""
    if not isinstance(cfg, dict):
        raise ConfigError(path, f"expected a mapping {{t, pn, ri_mode, ri_if_empty}}, got {cfg!r}")
    for key in cfg:
        if key not in KEYS:
            raise ConfigError(f"{path}.{key}", "unknown key", f"accepted: {', '.join(KEYS)}")
    out = {"t": cfg.get("t", 0.001), "pn": cfg.get("pn", 0.5), "ri_mode": cfg.get("ri_mode", "random_round"),
           "ri_if_empty": cfg.get("ri_if_empty", 1)}
    for key in ("t", "pn"):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"{path}.{key}", f"expected a number > 0, got {value!r}")
    if out["ri_mode"] not in RI_MODE_NAMES:
        why = (" (its epoch length would change from epoch to epoch)" if out["ri_mode"] == "random_round" else
               " (it needs LVIS's frequency labels)" if out["ri_mode"] == "c_ceil_r_f_floor" else "")
        given = "" if "ri_mode" in cfg else " (UP's default)"
        raise ConfigError(f"{path}.ri_mode", f"{out['ri_mode']!r}{given} is not mapped{why}",
                          f"set one of {', '.join(RI_MODE_NAMES)}")
    empty = out["ri_if_empty"]
    if isinstance(empty, bool) or not isinstance(empty, int) or empty < 0:
        raise ConfigError(f"{path}.ri_if_empty", f"expected an integer >= 0, got {empty!r}")
    return out
