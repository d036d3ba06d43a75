"""UP's BigNAS RegNet classification supernet: ``big_regnet`` (``task: detection``, its feature
maps) + ``BigClsHead`` + ``base_cls_postprocess``, trained by the sandwich rule of
:mod:`.bignas_sampling`.

The trunk is allocated at the space's largest values: a stem conv (stage 0: ``out_channel[0]``,
``kernel_size[0]``, stride 2), then per stage 1..4 ``depth`` RegNet bottlenecks (1x1 conv to
``mid = out * expand_ratio`` rounded to a multiple of ``divisor``, a grouped ``kernel_size``
conv of group width ``group_width``, stride 2 in a stage's first block, a 1x1 conv back to
``out``; a 1x1 conv ``shortcut`` + ``shortcutbn`` in each stage's first block). A subnet runs
on slices, as UP's dynamic ops do: each stage's first ``depth`` blocks, each conv's first
output / input channels and the centre of its kernel, the grouped conv's ``mid / group_width``
groups reading the first ``group_width`` stored inputs of each filter, each norm's first
channels; the head's linear layer reads the first features. Parameter names are UP's
(``first_conv.conv``, ``blocks.N.point_conv1.conv``, ``group_conv``, ``point_conv2``,
``head.classifier.linear``), so UP's supernet checkpoints load by name, and a supernet
checkpoint slices into a smaller space (a subnet written as fixed lists) by
:mod:`.bignas_weights`.
"""
from functools import partial

import torch.nn.functional as F
from torch import nn

from ...errors import ConfigError, join_path
from .bignas_elastic import conv, norm
from .bignas_parts import conv_norm_act, make_divisible
from .bignas_sampling import SandwichSampling, largest, read_part_space, read_schedule, sample
from .cls import UPClassifier, build_postprocess
from .options import entry_options

ELEMENTS = ("depth", "out_channel", "kernel_size", "expand_ratio", "group_width")
STAGES = 5


def _cna(x, seq, out, kernel, act=True, groups=1):
    x = norm(conv(x, seq.conv, out, kernel, groups), seq.bn)
    return F.relu(x) if act else x


class ElasticRegBlock(nn.Module):
    """UP's DynamicRegBottleneckBlock at its largest."""

    def __init__(self, cin, cout, kernel, expand, group_width, stride, norm_layer, divisor):
        super().__init__()
        mid = make_divisible(cout * expand, divisor)
        self.stride, self.divisor = stride, divisor
        self.point_conv1 = conv_norm_act(cin, mid, 1, norm_layer)
        self.group_conv = conv_norm_act(mid, mid, kernel, norm_layer, stride)
        # stored as UP does: mid / group_width groups, each filter group_width inputs wide
        self.group_conv.conv = nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid // group_width, bias=False)
        self.point_conv2 = conv_norm_act(mid, cout, 1, norm_layer, act=False)
        self.shortcut = self.shortcutbn = None  # identity: a stage's later blocks
        if cin != cout or stride != 1:
            self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False)
            self.shortcutbn = norm_layer(cout)

    def forward(self, x, out, kernel, expand, group_width):
        mid = make_divisible(out * expand, self.divisor)
        y = _cna(x, self.point_conv1, mid, 1)
        y = _cna(y, self.group_conv, mid, kernel, groups=mid // group_width)
        y = _cna(y, self.point_conv2, out, 1, act=False)
        skip = x if x.shape[1] == out and self.stride == 1 else norm(conv(x, self.shortcut, out, 1), self.shortcutbn)
        return F.relu(y + skip)


class ElasticRegNet(nn.Module):
    """forward(images) -> the maps of ``out_layers`` (0 the stem, 1..4 the stages) of the
    subnet in ``active`` ({element: per-stage values})."""

    def __init__(self, sizes, out_layers, norm_layer, divisor, frozen_layers=()):
        super().__init__()
        depth, out, kernel, expand, width = (sizes[k] for k in ELEMENTS)
        self.out_layers, self.frozen_layers = list(out_layers), list(frozen_layers)
        self.active = {k: list(v) for k, v in sizes.items()}
        self.first_conv = conv_norm_act(3, out[0], kernel[0], norm_layer, 2)
        blocks, self.stage_ends, cin = [], [], out[0]
        for stage in range(1, STAGES):
            for i in range(depth[stage]):
                blocks.append(ElasticRegBlock(cin, out[stage], kernel[stage], expand[stage], width[stage],
                                              2 if i == 0 else 1, norm_layer, divisor))
                cin = out[stage]
            self.stage_ends.append(len(blocks) - 1)
        self.blocks = nn.ModuleList(blocks)
        self.out_planes = [out[i] for i in self.out_layers]  # the largest; the active ones vary
        self._freeze()

    def _stages(self):
        starts = [0] + [end + 1 for end in self.stage_ends[:-1]]
        return [[self.first_conv]] + [list(self.blocks[a:b + 1]) for a, b in zip(starts, self.stage_ends)]

    def _freeze(self):
        for stage in self.frozen_layers:
            for module in self._stages()[stage]:
                module.eval()
                module.requires_grad_(False)

    def train(self, mode=True):
        super().train(mode)
        self._freeze()  # frozen stages keep their statistics, as UP's freeze_layer does
        return self

    def forward(self, x):
        a = self.active
        x = _cna(x, self.first_conv, a["out_channel"][0], a["kernel_size"][0])
        outs, starts = [x], [0] + [end + 1 for end in self.stage_ends[:-1]]
        for stage, start in enumerate(starts, 1):
            for i in range(a["depth"][stage]):
                x = self.blocks[start + i](x, *(a[k][stage] for k in ELEMENTS[1:]))
            outs.append(x)
        return [outs[i] for i in self.out_layers]


class ElasticClsHead(nn.Module):
    """UP's BigClsHead: average pool, optional dropout, a linear layer reading the first
    features (as many as the active subnet's map has)."""

    def __init__(self, in_plane, num_classes, feature_idx, dropout):
        super().__init__()
        self.feature_idx = feature_idx
        self.drop = nn.Dropout(dropout) if dropout else None
        self.classifier = nn.Module()
        self.classifier.linear = nn.Linear(in_plane, num_classes)
        nn.init.trunc_normal_(self.classifier.linear.weight, std=0.02)  # UP's head init
        nn.init.zeros_(self.classifier.linear.bias)

    def forward(self, features):
        x = F.adaptive_avg_pool2d(features[self.feature_idx], 1).flatten(1)
        if self.drop is not None:
            x = self.drop(x)
        linear = self.classifier.linear
        return F.linear(x, linear.weight[:, :x.shape[1]], linear.bias)


class BigNASClassifier(SandwichSampling, UPClassifier):
    """backbone -> head -> post-process on the elastic RegNet; ``space`` is the trunk's."""

    def __init__(self, parts, num_classes, space, schedule, sampling=None):
        super().__init__(parts, num_classes)
        self.init_sampling(space, schedule, sampling)

    def set_subnet(self, mode, rng=None):
        """Activate the subnet ``mode`` names (max, min or random with ``rng``); returns its settings."""
        settings = {self.part_names[0]: sample(self.space, mode, rng)}
        getattr(self, self.part_names[0]).active = settings[self.part_names[0]]
        self.subnet = (mode, settings)
        return settings

    def forward(self, batch):
        self.choose_subnet()
        out = super().forward(batch)
        if self.training:
            out["loss"] = self.touch_all(out["loss"])
        return out


def _check_groups(space, opts, divisor):
    """Every group width divides every middle width a subnet of its stage can draw."""
    for stage in range(1, STAGES):
        mids = sorted({make_divisible(o * e, divisor) for o in space["out_channel"][0][stage]
                       for e in space["expand_ratio"][0][stage]})
        for width in space["group_width"][0][stage]:
            bad = [m for m in mids if m % width]
            if bad:
                raise ConfigError(opts.at("group_width"), f"stage {stage}: group width {width} does not divide "
                                  f"the middle widths {bad} (out_channel x expand_ratio, rounded to {divisor})",
                                  "choose group widths dividing every width the stage's out_channel space allows")


def read_regnet(opts):
    """(elastic trunk, its space, schedule, sampling) from ``big_regnet``'s kwargs."""
    from .bignas_flops import read_sampling
    from .bignas_net import _norm

    space = read_part_space(opts, ELEMENTS, stem=True)
    for name, (allowed, _) in space.items():
        if len(allowed) != STAGES:
            raise ConfigError(opts.at(name), f"{len(allowed)} stages", f"big_regnet has {STAGES}: the stem, then 4")
    schedule, sampling = read_schedule(opts), read_sampling(opts)
    opts.take("task", "classification", types=str, only="detection", why="the supernet's own classifier "
              "(task: classification) is not built; task: detection with a BigClsHead entry classifies")
    opts.ignore("num_classes", "read by task: classification only")
    opts.ignore("dropout_rate", "read by task: classification only")
    opts.take("kernel_transform", False, types=bool, only=False, why="kernels are centre crops of the largest")
    opts.ignore("zero_last_gamma", "UP zeroes no gamma in RegNet bottlenecks")
    opts.take("stride_stages", [2] * STAGES, types=list, only=[2] * STAGES, why="UP's default strides")
    opts.take("act_stages", ["relu"] * STAGES, types=list, only=["relu"] * STAGES, why="ReLU throughout")
    opts.take("se_stages", [False] * STAGES, types=list, only=[False] * STAGES,
              why="UP's squeeze-and-excitation in RegNet bottlenecks is not built")
    opts.ignore("se_act_func1", "read with se_stages only")
    opts.ignore("se_act_func2", "read with se_stages only")
    divisor = opts.take("divisor", 8, types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    _check_groups(space, opts, divisor)
    frozen = opts.take("frozen_layers", [], types=(list, type(None)), check=lambda v: None if all(
        isinstance(i, int) and 0 <= i < STAGES for i in v or []) else "stage indices are 0..4") or []
    out_layers = opts.take("out_layers", types=list, check=lambda v: None if v and all(
        isinstance(i, int) and 0 <= i < STAGES for i in v) else "stage indices are 0..4")
    want = [2 ** (i + 1) for i in out_layers]
    opts.take("out_strides", want, types=list, only=want, why="the strides follow from out_layers")
    norm_layer, _ = _norm(opts)
    if not isinstance(norm_layer(8), nn.BatchNorm2d) or not norm_layer(8).track_running_stats:
        raise ConfigError(opts.at("normalize.type"), "an elastic net runs BatchNorm on slices of its statistics",
                          "dynamic_solo_bn (or solo_bn)")
    opts.done()
    trunk = ElasticRegNet(largest(space), out_layers, norm_layer, divisor, frozen)
    for m in trunk.modules():  # UP's supernet init: fan-out normal convs, norms (1, 0)
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight), nn.init.zeros_(m.bias)
    return trunk, space, schedule, sampling


def read_head(opts, trunk):
    num_classes = opts.take("num_classes", types=(int, list), check=lambda v: None if isinstance(v, int) and v >= 1
                            else "one positive class count (several classifier heads on the supernet are not built)")
    idx = opts.take("input_feature_idx", -1, types=int)
    planes = trunk.out_planes
    if not -len(planes) <= idx < len(planes):
        raise ConfigError(opts.at("input_feature_idx"), f"{idx} but the backbone gives {len(planes)} feature maps")
    opts.take("in_plane", planes[idx], types=int, only=planes[idx], why="the backbone's largest out_channel")
    opts.take("use_pool", True, types=bool, only=True, why="the head pools the backbone's feature map")
    dropout = opts.take("dropout", 0, types=(int, float), check=lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
    opts.done()
    return ElasticClsHead(planes[idx], num_classes, idx, dropout), num_classes


def build_bignas_classifier(net_cfg, path):
    from .bignas_weights import slice_supernet

    types = tuple(e["type"] for e in net_cfg)
    if types != ("big_regnet", "BigClsHead", "base_cls_postprocess"):
        raise ConfigError(path, f"the UP parts {' + '.join(types)} do not form a mapped BigNAS classifier",
                          "mapped: big_regnet + BigClsHead + base_cls_postprocess")
    opts = entry_options(net_cfg, path)
    trunk, space, schedule, sampling = read_regnet(opts[0])
    head, num_classes = read_head(opts[1], trunk)
    post = build_postprocess(opts[2], num_classes)
    post.heads_path = join_path(join_path(path, 1), "kwargs.num_classes")
    names = [e["name"] for e in net_cfg]
    model = BigNASClassifier(list(zip(names, (trunk, head, post))), num_classes, space, schedule, sampling)
    model.sync_bn_group_size = None  # BatchNorm runs on slices of its statistics: not converted
    model.num_classes_path = join_path(join_path(path, 1), "kwargs.num_classes")
    model.translate_up_weights = partial(slice_supernet, model=model, names=names[:1], static=False)
    return model
