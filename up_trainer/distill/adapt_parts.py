"""UP's ``ADAP`` parts built (their spec: :mod:`.adapt_spec`): convs on chosen levels of a
student part's output maps, registered in the student's ``distill_adapters`` so the optimizer,
DDP, AMP and checkpoints see them, and run by the distiller beside the part they read."""
from torch import nn

from ..errors import ConfigError, join_path
from .modules import find_module


class AdaptPart(nn.Module):
    """One conv (3x3 or 1x1, then a ReLU with ``with_relu``) per chosen level: ``conv.<i>.0``
    is the conv of the i-th chosen level, ``conv.<i>.1`` its ReLU (UP's module names)."""

    def __init__(self, spec, inplanes):
        super().__init__()
        self.levels = list(spec.levels)
        self.conv = nn.ModuleList()
        for cin, cout in zip(inplanes, spec.outplanes):
            layers = [nn.Conv2d(cin, cout, spec.kernel_size, padding=spec.kernel_size // 2)]
            if spec.with_relu:
                layers.append(nn.ReLU())
            self.conv.append(nn.Sequential(*layers))
        if spec.small_init:  # UP's do_init_weights: tiny weights, so the part starts near zero output
            for seq in self.conv:
                w = seq[0].weight
                if w.device.type != "meta":
                    w.data.normal_().fmod_(2).mul_(1e-4)

    def forward(self, maps):
        return [conv(maps[level]) for conv, level in zip(self.conv, self.levels)]


def part_maps(output):
    """A part's output as a list of maps: a backbone's list, an FPN's ordered dict."""
    if isinstance(output, dict):
        return list(output.values())
    if isinstance(output, (list, tuple)):
        return list(output)
    return [output]


def _in_channels(module):
    """Channels of each map the part gives: a UP backbone's out_planes, an FPN's out_channels."""
    planes = getattr(module, "out_planes", None)
    if isinstance(planes, (list, tuple)):
        return list(planes)
    channels = getattr(module, "out_channels", None)
    strides = getattr(module, "out_strides", None)
    if isinstance(channels, int) and isinstance(strides, (list, tuple)):
        return [channels] * len(strides)
    return None


def build_adapt_parts(spec, student):
    """{name: AdaptPart} sized from the student parts they read."""
    parts = {}
    for adapt in spec.adapt:
        source = find_module(student, adapt.on, join_path(adapt.path, "on"), "student")
        channels = _in_channels(source)
        if channels is None:
            raise ConfigError(join_path(adapt.path, "on"), f"the channels of {adapt.on}'s maps cannot be read",
                              "on: a UP backbone or FPN part (backbone, neck)")
        bad = [lvl for lvl in adapt.levels if lvl >= len(channels)]
        if bad:
            raise ConfigError(join_path(adapt.path, "levels"), f"level {bad[0]} but {adapt.on} gives "
                              f"{len(channels)} maps", f"levels 0..{len(channels) - 1}")
        parts[adapt.name] = AdaptPart(adapt, [channels[lvl] for lvl in adapt.levels])
    return parts
