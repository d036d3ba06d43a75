"""The search space and sampling rule shared by UP's BigNAS supernets (the RetinaNet of
:mod:`.bignas_supernet`, the RegNet classifier of :mod:`.bignas_regnet`).

A part's space is {element: (allowed values per stage, sample strategy)}. Iteration ``t`` of
supernet training trains the subnet ``schedule[t % len]`` names (UP's
``bignas.train.sample_strategy``, by default max, random, random, min): ``max`` every element
at its largest, ``min`` at its smallest, ``random`` drawn per element by its own
``sample_strategy`` with a generator seeded by ``t`` (UP seeds Python's random with the step),
so a resumed run draws the same subnets. The step counter is a buffer of the model, saved in
its checkpoints. Inactive weights get a zero gradient each step (UP's fake loss), so
data-parallel training sees every parameter used.
"""
import random

import torch

from ...errors import ConfigError

MODES = ("max", "min", "random")
STRATEGIES = ("stage_wise", "stage_wise_depth", "net_wise", "ordered_stage_wise")
SCHEDULE_KEY = "bignas_sample_strategy"  # set from bignas.train.sample_strategy by config/up_bignas.py
WHOLE = ("depth", "out_channel", "group_width")  # elements whose values are whole numbers


def read_part_space(opts, elements, defaults=None, stem=False):
    """{element: (allowed values per stage, strategy)} of one supernet entry, its element
    kwargs consumed; ``defaults`` gives values for elements UP lets a file leave out; ``stem``:
    stage 0 is a single-conv stem (depth exactly 1)."""
    from ...config.bignas_space import read_element

    space = {}
    for name in elements:
        if defaults and name in defaults:
            value = opts.take(name, defaults[name], types=(list, dict))
        else:
            value = opts.take(name, types=(list, dict))
        strategy = value.get("sample_strategy", "stage_wise") if isinstance(value, dict) else "stage_wise"
        if strategy not in STRATEGIES:
            raise ConfigError(opts.at(f"{name}.sample_strategy"), f"UP's {strategy!r} sampling is not built",
                              f"built: {', '.join(STRATEGIES)}")
        allowed = read_element(value, opts.at(name))
        _check_values(name, allowed, opts.at(name), stem)
        if strategy == "net_wise" and any(a != allowed[0] for a in allowed):
            raise ConfigError(opts.at(name), "net_wise sampling needs the same values in every stage")
        space[name] = (allowed, strategy)
    return space


def read_schedule(opts):
    return opts.take(SCHEDULE_KEY, ["max", "random", "random", "min"], types=list, check=lambda v: None if v
                     and all(m in MODES for m in v) else f"each entry one of {', '.join(MODES)}")


def _check_values(name, allowed, path, stem):
    """Every value a subnet may draw builds: blocks >= 1 per stage (the stem exactly 1), odd
    kernels, positive widths, group widths and expand ratios, whole channel counts."""
    for stage, values in enumerate(allowed):
        if name == "depth" and stem and stage == 0 and values != [1]:
            raise ConfigError(path, f"stage 0 allows {values}", "stage 0 is the stem: depth 1")
        bad = [v for v in values if (v < 1 if name in WHOLE else v % 2 == 0 if name == "kernel_size" else v <= 0)
               or (name in WHOLE + ("kernel_size",) and v != int(v))]
        if bad:
            why = {"depth": "every stage keeps at least one block", "kernel_size": "kernel sizes are odd integers"}
            raise ConfigError(path, f"stage {stage} allows {bad}", why.get(name, "values are positive "
                              "(whole numbers for channels)"))


def largest(part):
    return {name: [max(v) for v in allowed] for name, (allowed, _) in part.items()}


def _draw(allowed, strategy, rng, depth_index=None):
    if strategy == "net_wise":
        return [rng.choice(allowed[0])] * len(allowed)
    out = []
    for stage, values in enumerate(allowed):
        if strategy == "stage_wise_depth" and depth_index is not None and depth_index[stage][1] == len(values):
            out.append(values[depth_index[stage][0]])  # UP pairs the element's index with the depth's
        elif strategy == "ordered_stage_wise" and out and any(v >= out[-1] for v in values):
            out.append(rng.choice([v for v in values if v >= out[-1]]))
        else:
            out.append(rng.choice(values))
    return out


def sample(part, mode, rng):
    """One setting of ``part`` ({element: per-stage values})."""
    if mode in ("max", "min"):
        pick = max if mode == "max" else min
        return {name: [pick(v) for v in allowed] for name, (allowed, _) in part.items()}
    depth_allowed, depth_strategy = part["depth"]
    depth = _draw(depth_allowed, depth_strategy, rng)
    index = [(values.index(d), len(values)) for d, values in zip(depth, depth_allowed)]
    out = {"depth": depth}
    for name, (allowed, strategy) in part.items():
        if name != "depth":
            out[name] = _draw(allowed, strategy, rng, index)
    return out


class SandwichSampling:
    """The supernet side of a model: ``set_subnet(mode, rng)`` (the model's own) activates a
    subnet; this mixin chooses it per training step and keeps the step in a buffer."""

    def init_sampling(self, space, schedule, sampling):
        self.space, self.schedule = space, list(schedule)
        self.sampling = sampling  # (subnet_count, flops range) for up flops: bignas_flops.py
        self.hold_subnet = False  # evaluate the subnet set_subnet chose rather than the largest
        self.register_buffer("bignas_step", torch.zeros((), dtype=torch.long))
        self.subnet = None

    def choose_subnet(self):
        """Training: the step's subnet (and the step advanced); evaluation: the largest, unless held."""
        if not self.training:
            if not self.hold_subnet:
                self.set_subnet("max")
            return
        step = int(self.bignas_step)
        self.set_subnet(self.schedule[step % len(self.schedule)], random.Random(step * 1000))
        self.bignas_step += 1

    def touch_all(self, loss):
        """``loss`` plus zero times every trainable parameter: all of them in the graph."""
        return loss + sum(p.sum() for p in self.parameters() if p.requires_grad) * 0.0

    def sampled_flops_lines(self, size):
        """``up flops``: the sampled subnets' multiply-adds (none without UP's sampling keys)."""
        from .bignas_flops import sampled_subnets

        return [] if self.sampling is None else sampled_subnets(self, size, *self.sampling)
