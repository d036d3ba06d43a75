"""Choosing which units to checkpoint for an input size, under ``max_memory``.

The budget is compared with the predicted activation bytes on CPU (the only memory the
planner can measure there) and with the predicted peak ``overhead(n) + activations`` on
CUDA, where the overhead (weights, gradients, optimizer state, workspaces) is fitted from
torch.cuda.max_memory_allocated and one recomputed unit's activations are added for the
transient of its recomputation during backward.

Units are ranked by the activation bytes they save, not by the change of that prediction: on
CUDA the first checkpointed unit brings its own recomputation transient, so alone no unit
lowers the peak prediction (it saves at most what it recomputes), while several do.

Strategies:
- ``greedy``: add the unit with the largest marginal saving until the prediction fits (few
  modules: each step covers as much of the remaining need as any single module can).
- ``memory_time``: 0/1 knapsack (min-cost cover on the savings discretised into 256 steps,
  rounded down so the cover is never optimistic) minimising predicted recompute time subject
  to saving what is needed; then topped up greedily if the exact prediction still exceeds.
Both end with a pruning pass dropping units the plan does not need (slowest first).
Nothing is checkpointed when the un-checkpointed prediction fits.
"""
from dataclasses import dataclass

from ..errors import ConfigError, did_you_mean

GB = 1024 ** 3
STRATEGIES = ("greedy", "memory_time")
DC_DEFAULTS = {"warmup_iters": 30, "max_memory": None, "debug_freq": 10, "strategy": "greedy", "bucket": 32}
_STEPS = 256


def parse_dc_cfg(cfg, path="dc_cfg"):
    if not isinstance(cfg, dict):
        raise ConfigError(path, f"expected a mapping, got {type(cfg).__name__}")
    for key in cfg:
        if key not in DC_DEFAULTS:
            raise ConfigError(f"{path}.{key}", "unknown key",
                              did_you_mean(key, DC_DEFAULTS) or f"accepted: {', '.join(DC_DEFAULTS)}")
    out = dict(DC_DEFAULTS, **cfg)
    for key in ("warmup_iters", "debug_freq", "bucket"):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{path}.{key}", f"expected an int >= 1, got {v!r}")
    mem = out["max_memory"]
    if mem is None:
        raise ConfigError(f"{path}.max_memory", "required in dynamic mode (GB, fractions allowed)", "e.g. 8")
    if isinstance(mem, bool) or not isinstance(mem, (int, float)) or mem <= 0:
        raise ConfigError(f"{path}.max_memory", f"expected a number of GB > 0, got {mem!r}")
    if out["strategy"] not in STRATEGIES:
        raise ConfigError(f"{path}.strategy", f"unknown strategy {out['strategy']!r}",
                          did_you_mean(out["strategy"], STRATEGIES) or "use greedy or memory_time")
    return out


@dataclass
class Plan:
    units: frozenset
    predicted: float  # bytes compared with the budget
    unchecked: float  # the same prediction without checkpointing
    seconds: float  # predicted recompute time
    fits: bool

    def describe(self):
        names = ", ".join(sorted(self.units)) or "nothing"
        return (f"checkpoint {len(self.units)} unit(s) [{names}]: predicted {self.predicted / 2**20:.2f} MiB "
                f"(without: {self.unchecked / 2**20:.2f} MiB), recompute ~{self.seconds * 1e3:.1f} ms"
                + ("" if self.fits else " - OVER BUDGET even so"))


class Planner:
    def __init__(self, profile, units, max_memory_gb, strategy="greedy", cuda=False):
        self.profile = profile
        self.units = [u for u in units if u in set(profile.units)]
        self.budget = float(max_memory_gb) * GB
        self.strategy = strategy
        self.cuda = cuda
        self.cache = {}
        self.hits = self.misses = 0

    def plan_for(self, key, n):
        plan = self.cache.get(key)
        if plan is None:
            self.misses += 1
            plan = self.cache[key] = self.plan(n)
        else:
            self.hits += 1
        return plan

    def _activations(self, n, plan, groups):
        """Predicted activation bytes kept for backward with ``plan`` checkpointed."""
        return self.profile.margin * self.profile.bytes_at(n, plan, groups)

    def _peak_model(self):
        return self.cuda and self.profile.overhead is not None

    def _predict(self, n, plan, groups):
        """What is compared with the budget (see module docstring)."""
        act = self._activations(n, plan, groups)
        if not self._peak_model():
            return act
        transient = max((self._alone(u, groups) for u in plan), default=0.0)
        return self.profile.overhead(n) + act + transient

    def _alone(self, unit, groups):
        """Bytes a unit saves on its own (its own activations, recomputed in backward)."""
        return sum(b for savers, _, b in groups if unit in savers)

    def plan(self, n):
        groups = self.profile.groups_at(n)
        secs = {u: self.profile.seconds(u, n) for u in self.units}
        empty = frozenset()
        unchecked = self._predict(n, empty, groups)
        chosen = empty
        if unchecked > self.budget:
            if self.strategy == "memory_time":
                chosen = self._knapsack(n, groups, secs, unchecked)
            chosen = self._greedy(n, groups, secs, chosen)
            chosen = self._prune(n, groups, secs, chosen)
        pred = self._predict(n, chosen, groups)
        return Plan(chosen, pred, unchecked, sum(secs[u] for u in chosen), pred <= self.budget)

    def _greedy(self, n, groups, secs, chosen):
        cur = self._predict(n, chosen, groups)
        while cur > self.budget:
            best = None
            kept = self._activations(n, chosen, groups)
            for u in self.units:
                if u in chosen:
                    continue
                gain = kept - self._activations(n, chosen | {u}, groups)
                if gain > 0 and (best is None or (gain, -secs[u]) > best[0]):
                    best = ((gain, -secs[u]), u)
            if best is None:
                break
            chosen = chosen | {best[1]}
            cur = self._predict(n, chosen, groups)
        return chosen

    def _knapsack(self, n, groups, secs, unchecked):
        # on CUDA the cover must also pay for one recomputation transient: the largest, to be safe
        transient = max((self._alone(u, groups) for u in self.units), default=0.0) if self._peak_model() else 0.0
        need = unchecked - self.budget + transient
        step = need / _STEPS
        kept = self._activations(n, frozenset(), groups)
        items = []
        for u in self.units:
            saving = kept - self._activations(n, frozenset([u]), groups)
            w = min(_STEPS, int(saving / step))  # rounded down: never optimistic
            if w > 0:
                items.append((u, w, secs[u]))
        # best[c] = (seconds, units) reaching at least c steps of saving (c capped at _STEPS)
        inf = float("inf")
        best = [(0.0, frozenset())] + [(inf, None)] * _STEPS
        for u, w, t in items:
            for c in range(_STEPS, 0, -1):
                prev = best[max(0, c - w)]
                if prev[1] is not None and prev[0] + t < best[c][0]:
                    best[c] = (prev[0] + t, prev[1] | {u})
            # a cover of c steps also covers every smaller c
            for c in range(_STEPS - 1, 0, -1):
                if best[c + 1][0] < best[c][0]:
                    best[c] = best[c + 1]
        return best[_STEPS][1] if best[_STEPS][1] is not None else frozenset(u for u, _, _ in items)

    def _prune(self, n, groups, secs, chosen):
        for u in sorted(chosen, key=lambda u: -secs[u]):
            if self._predict(n, chosen - {u}, groups) <= self.budget:
                chosen = chosen - {u}
        return chosen
