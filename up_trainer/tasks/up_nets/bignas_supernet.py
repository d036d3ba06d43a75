"""UP's BigNAS supernet training: the elastic RetinaNet of :mod:`.bignas_elastic`, one subnet per
training iteration chosen by the sandwich rule.

Iteration ``t`` trains the subnet ``sample_strategy[t % len]`` names (UP's
``bignas.train.sample_strategy``, by default max, random, random, min): ``max`` every element
at its largest, ``min`` at its smallest, ``random`` drawn per part from the space by the
element's own ``sample_strategy`` with a generator seeded by ``t`` (UP seeds Python's random
with the step), so a resumed run draws the same subnets. The step counter is a buffer of the
model, saved in its checkpoints. Evaluation runs the largest subnet. Inactive weights get a
zero gradient each step (UP's fake loss), so data-parallel training sees every parameter used.
"""
import random

import torch

from ...errors import ConfigError
from ..det.atss import RetinaPlusModel

MODES = ("max", "min", "random")
STRATEGIES = ("stage_wise", "stage_wise_depth", "net_wise", "ordered_stage_wise")
PART_ELEMENTS = {0: ("depth", "out_channel", "kernel_size", "expand_ratio"), 1: ("depth", "out_channel", "kernel_size"),
                 2: ("depth", "out_channel", "kernel_size")}
SCHEDULE_KEY = "bignas_sample_strategy"  # set from bignas.train.sample_strategy by config/up_bignas.py


def read_space(opts):
    """{part index: {element: (allowed values per stage, sample strategy)}} of the supernet's
    three elastic entries (their element kwargs consumed), and the per-step schedule."""
    from ...config.bignas_space import read_element

    space = {}
    for i, elements in PART_ELEMENTS.items():
        space[i] = {}
        for name in elements:
            default = [3] if (i, name) == (2, "kernel_size") else None
            value = opts[i].take(name, types=(list, dict)) if default is None else \
                opts[i].take(name, default, types=(list, dict))
            strategy = value.get("sample_strategy", "stage_wise") if isinstance(value, dict) else "stage_wise"
            if strategy not in STRATEGIES:
                raise ConfigError(opts[i].at(f"{name}.sample_strategy"), f"UP's {strategy!r} sampling is not built",
                                  f"built: {', '.join(STRATEGIES)}")
            allowed = read_element(value, opts[i].at(name))
            _check_values(name, allowed, opts[i].at(name), stem=i == 0)
            if strategy == "net_wise" and any(a != allowed[0] for a in allowed):
                raise ConfigError(opts[i].at(name), "net_wise sampling needs the same values in every stage")
            space[i][name] = (allowed, strategy)
    schedule = opts[0].take(SCHEDULE_KEY, ["max", "random", "random", "min"], types=list, check=lambda v: None if v
                            and all(m in MODES for m in v) else f"each entry one of {', '.join(MODES)}")
    return space, schedule


def _check_values(name, allowed, path, stem):
    """Every value a subnet may draw builds: blocks >= 1 per stage (the stem exactly 1), odd
    kernels, positive widths and expand ratios."""
    for stage, values in enumerate(allowed):
        if name == "depth" and stem and stage == 0 and values != [1]:
            raise ConfigError(path, f"stage 0 allows {values}", "stage 0 is the stem: depth 1")
        bad = [v for v in values if (v < 1 if name in ("depth", "out_channel") else
                                     v % 2 == 0 if name == "kernel_size" else v <= 0)]
        if bad:
            why = {"depth": "every stage keeps at least one block", "kernel_size": "kernel sizes are odd"}
            raise ConfigError(path, f"stage {stage} allows {bad}", why.get(name, "values are positive"))


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


class BigNASSupernet(RetinaPlusModel):
    """The ATSS RetinaNet on elastic parts; ``space``/``schedule`` from :func:`read_space`."""

    kind = "retina_plus"

    def __init__(self, *args, space, schedule, sampling=None, accuracy=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.space, self.schedule = space, list(schedule)
        self.sampling = sampling  # (subnet_count, flops range) for up flops: bignas_flops.py
        self.accuracy = accuracy  # UP's sample_accuracy options for up eval: bignas_accuracy.py
        self.hold_subnet = False  # evaluate the subnet set_subnet chose rather than the largest
        self.register_buffer("bignas_step", torch.zeros((), dtype=torch.long))
        self.subnet = None

    def set_subnet(self, mode, rng=None):
        """Activate the subnet ``mode`` names (max, min or random with ``rng``); returns its settings."""
        settings = {"backbone": sample(self.space[0], mode, rng), "neck": sample(self.space[1], mode, rng),
                    "roi_head.cls_subnet": sample(self.space[2], mode, rng),
                    "roi_head.box_subnet": sample(self.space[2], mode, rng)}
        self.activate(settings)
        self.subnet = (mode, settings)
        return settings

    def activate(self, settings):
        """Activate the subnet of ``settings`` (as set_subnet returns them)."""
        self.backbone.active = settings["backbone"]
        self.neck.active = settings["neck"]
        self.roi_head.active = {"cls_subnet": settings["roi_head.cls_subnet"],
                                "box_subnet": settings["roi_head.box_subnet"]}
        self.subnet = ("subnet", settings)

    def evaluate_in(self, trainer):
        """up eval: UP's sample_accuracy phase when the file asks for it, else the largest subnet."""
        if self.accuracy is None:
            return trainer.evaluate()
        from .bignas_accuracy import sample_accuracy

        return sample_accuracy(trainer, self, self.accuracy)

    def sampled_flops_lines(self, size):
        """``up flops``: the sampled subnets' multiply-adds (none without UP's sampling keys)."""
        from .bignas_flops import sampled_subnets

        return [] if self.sampling is None else sampled_subnets(self, size, *self.sampling)

    def forward(self, batch):
        if not self.training:
            if not self.hold_subnet:
                self.set_subnet("max")
            return super().forward(batch)
        step = int(self.bignas_step)
        self.set_subnet(self.schedule[step % len(self.schedule)], random.Random(step * 1000))
        self.bignas_step += 1
        losses = super().forward(batch)
        unused = sum(p.sum() for p in self.parameters() if p.requires_grad) * 0.0  # every parameter in the graph
        return {**losses, "loss_cls": losses["loss_cls"] + unused}

