"""UP's ``sample_flops`` phase as part of ``up flops``: the FLOPs of random subnets of a BigNAS
supernet, kept when within ``bignas.subnet.flops_range``.

UP counts a FLOP as one multiply-add of a conv or linear layer; torch's flop counter counts a
multiply-add as two, so the count here is torch's halved (UP's unit), compared with
``flops_range`` (``'100G'``-style strings, K/M/G/T). Subnets are drawn as in training (each
part by its elements' sample strategies) from a generator seeded with 0, so a run lists the
same subnets; at most 20 draws per wanted subnet are tried. ``up eval``'s sample_accuracy
(bignas_accuracy.py) evaluates the same subnets.
"""
import json
import random

import torch
from torch.utils.flop_counter import FlopCounterMode


def read_sampling(opts):
    """(subnet_count, (low, high) or None) of the ``bignas_subnet_sampling`` kwarg, or None."""
    from ...config.bignas_space import read_sampling_keys

    value = opts.take("bignas_subnet_sampling", None, types=(dict, type(None)))
    if value is None:
        return None
    return read_sampling_keys(value, opts.at("bignas_subnet_sampling"))


def human(n):
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.2f}{unit}"
        n /= 1000
    return f"{n:.2f}P"


@torch.no_grad()
def count_macs(model, size):
    counter = FlopCounterMode(display=False, depth=None)
    with counter:
        model({"image": torch.zeros(1, *size)})
    return counter.get_total_flops() / 2


@torch.no_grad()
def draw_subnets(model, size, count, span):
    """([(multiply-adds, settings)] of the kept subnets, smallest first; draws tried)."""
    rng = random.Random(0)
    model.eval()
    kept, tries = [], 0
    try:
        while len(kept) < count and tries < 20 * count:
            tries += 1
            settings = model.set_subnet("random", rng)
            model.hold_subnet = True
            macs = count_macs(model, size)
            if span is None or span[0] <= macs <= span[1]:
                kept.append((macs, settings))
    finally:
        model.hold_subnet = False
    return sorted(kept, key=lambda r: r[0]), tries


def sampled_subnets(model, size, count, span):
    """Lines: one per kept subnet (its multiply-adds and settings as JSON)."""
    kept, tries = draw_subnets(model, size, count, span)
    where = "" if span is None else f" within {human(span[0])}..{human(span[1])}"
    lines = [f"sampled subnets (UP's sample_flops): {len(kept)} of {tries} drawn{where}, multiply-adds at "
             f"1x{'x'.join(map(str, size))}"]
    lines += [f"{human(macs):>10}  {json.dumps(settings)}" for macs, settings in kept]
    return lines
