"""UP's BigNAS RetinaNet subnet: ``bignas_resnet_basic`` + ``bignas_fpn`` +
``BignasRetinaHeadWithBN`` + ``retina_post`` -> :class:`up_trainer.tasks.det.atss.RetinaPlusModel`
on the static parts of :mod:`.bignas_parts` (ATSS assignment, QFL and GIoU as UP's file asks,
read by :mod:`.atss_net`). A supernet file's net was rewritten into these parts by
:mod:`up_trainer.config.up_bignas`. Every kwarg is honoured or refused in one line; UP's
``dynamic_`` norms are the plain ones (UP strips the prefix in its static parts).
"""
from functools import partial

from ...errors import ConfigError, join_path
from .layers import initialize, norm_layer, read_initializer
from .options import entry_options

PARTS = ("bignas_resnet_basic", "bignas_fpn", "BignasRetinaHeadWithBN")
SUPERNET_PARTS = ("big_resnet_basic", "big_fpn", "BigRetinaHeadWithBN")
STAGES = 5
NATURAL_STRIDES = [2, 4, 8, 16, 32]  # stem stride 2, the max-pool, then stages 2..4 at stride 2


def _ints(opts, key, length=None, default=None, minimum=1, numbers=int):
    """A list of numbers, ``length`` long when given (one per stage)."""
    def check(v):
        if length is not None and len(v) != length:
            return f"expected {length} values (one per stage), got {len(v)}"
        if not v or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= minimum for x in v):
            return f"expected numbers >= {minimum}, got {v}"
        if numbers is int and not all(isinstance(x, int) for x in v):
            return f"expected integers, got {v}"
        return None
    return opts.take(key, types=list, check=check) if default is None else \
        opts.take(key, default, types=list, check=check)


def _norm(opts, default="solo_bn"):
    """UP's normalize with its ``dynamic_`` prefix dropped (a static part's norm)."""
    value = opts.kwargs.get("normalize")
    if isinstance(value, dict) and isinstance(value.get("type"), str) and value["type"].startswith("dynamic_"):
        opts.kwargs["normalize"] = {**value, "type": value["type"][len("dynamic_"):]}
    return norm_layer(opts, default=default)


def read_trunk(opts, sizes=None):
    """The static trunk; with ``sizes`` (the largest depth / out_channel / kernel_size /
    expand_ratio of a supernet's space, read by the caller) the elastic one."""
    from .bignas_elastic import ElasticResNetBasic
    from .bignas_parts import BigNASResNetBasic

    if sizes is None:
        depth = _ints(opts, "depth", STAGES)
        channels = _ints(opts, "out_channel", STAGES)
        kernels = _ints(opts, "kernel_size", STAGES)
        expand = _ints(opts, "expand_ratio", STAGES, default=[0.5, 1, 1, 1, 1], minimum=0, numbers=float)
    else:
        depth, channels, kernels, expand = (sizes[k] for k in ("depth", "out_channel", "kernel_size", "expand_ratio"))
        zero_gamma = opts.take("zero_last_gamma", True, types=bool)
        opts.take("kernel_transform", False, types=bool, only=False, why="kernels are centre crops of the largest")
    if any(k % 2 == 0 for k in kernels):
        raise ConfigError(opts.at("kernel_size"), f"{kernels}: kernel sizes are odd")
    opts.take("task", "classification", types=str, only="detection",
              why="the classification BigNAS subnet is not mapped; a detection trunk returns feature maps")
    opts.ignore("num_classes", "read by the classification subnet only")
    opts.ignore("dropout_rate", "read by the classification subnet only")
    opts.take("gray", False, types=bool, only=False, why="three-channel images")
    opts.take("stride_stages", [2, 1, 2, 2, 2], types=list, only=[2, 1, 2, 2, 2], why="UP's default strides")
    opts.take("act_stages", ["relu"] * STAGES, types=list, only=["relu"] * STAGES, why="ReLU throughout")
    opts.take("divisor", 8, types=int, only=8, why="channels round to multiples of 8")
    opts.take("use_maxpool", True, types=bool, only=True, why="the stem is followed by UP's 2x2 max-pool")
    deep_stem = opts.take("deep_stem", False, types=bool)
    frozen = opts.take("frozen_layers", [], types=(list, type(None)), check=lambda v: None if all(
        isinstance(i, int) and 0 <= i < STAGES for i in v or []) else "stage indices are 0..4") or []
    out_layers = opts.take("out_layers", types=list, check=lambda v: None if v and all(
        isinstance(i, int) and 0 <= i < STAGES for i in v) else "stage indices are 0..4")
    want = [NATURAL_STRIDES[i] for i in out_layers]
    opts.take("out_strides", want, types=list, only=want, why="the strides follow from out_layers")
    norm, sync = _norm(opts)
    init = read_initializer(opts, default={"method": "msra"})
    opts.done()
    if any(d < 1 for d in depth[1:]) or depth[0] != 1:
        raise ConfigError(opts.at("depth"), f"{depth}: stage 0 is the stem (depth 1), stages 1..4 have >= 1 block")
    cls = BigNASResNetBasic if sizes is None else ElasticResNetBasic
    trunk = cls(depth, channels, kernels, expand, out_layers, norm, deep_stem, frozen_layers=frozen)
    initialize(trunk, init)
    if sizes is not None and zero_gamma:
        trunk.zero_last_gamma()
    trunk.out_strides = want
    return trunk, sync


def read_fpn(opts, trunk, sizes=None):
    """The static FPN, or with ``sizes`` (a supernet's largest, as :func:`read_trunk`) the elastic one."""
    from .bignas_elastic import ElasticFPN
    from .bignas_parts import BigNASFPN

    n = len(trunk.out_planes)
    opts.take("inplanes", trunk.out_planes, types=list, only=trunk.out_planes, why="the backbone's channels")
    start = opts.take("start_level", types=int)
    num_level = opts.take("num_level", types=int, check=lambda v: None if v >= n else f"at least the {n} inputs")
    want = list(trunk.out_strides) + [trunk.out_strides[-1] * 2 ** (i + 1) for i in range(num_level - n)]
    opts.take("out_strides", types=list, only=want, why="the strides follow from the backbone's and num_level")
    downsample = opts.take("downsample", types=str, check=lambda v: None if v in ("pool", "conv") else
                           "expected pool or conv")
    opts.take("upsample", "nearest", types=str, only="nearest", why="the top-down path upsamples with nearest")
    opts.ignore("align_corners", "no effect with nearest upsampling")
    opts.ignore("tocaffe_friendly", "the same result here: levels are exact halves (inputs padded to 32)")
    opts.ignore("to_onnx", "an export option")
    use_p5 = opts.take("use_p5", False, types=bool)
    depth = _ints(opts, "depth", 2) if sizes is None else sizes["depth"]
    if depth != [n, num_level]:
        raise ConfigError(opts.at("depth"), f"{depth}: expected [{n}, {num_level}] (the laterals, then the "
                          "output and extra-level convs)")
    channels = _ints(opts, "out_channel", 2) if sizes is None else sizes["out_channel"]
    kernels = _ints(opts, "kernel_size") if sizes is None else sizes["kernel_size"]
    if len(kernels) == 2:
        kernels = [kernels[0]] * n + [kernels[1]] * num_level
    if len(kernels) != n + num_level or any(k % 2 == 0 for k in kernels):
        raise ConfigError(opts.at("kernel_size"), f"{kernels}: one odd size per depth stage (2) or per conv "
                          f"({n + num_level})")
    norm = _norm(opts)[0] if opts.kwargs.get("normalize") is not None else opts.take("normalize", None)
    init = read_initializer(opts)
    opts.done()
    if sizes is None:
        fpn = BigNASFPN(trunk.out_planes, channels[0], channels[1], kernels, num_level, start, downsample, norm, use_p5)
    else:
        fpn = ElasticFPN(trunk.out_planes, channels, [kernels[0], kernels[n]], num_level, start, downsample, norm,
                         use_p5)
    initialize(fpn, init)
    fpn.out_strides = want
    return fpn


def read_head(opts, fpn, levels, sizes=None):
    """(a function building the head for a number of anchors, num_classes, sync group); with
    ``sizes`` (a supernet's largest tower: depth, out_channel, kernel_size) the elastic head."""
    from .bignas_elastic import ElasticRetinaHead
    from .bignas_parts import BigNASRetinaHead

    cin = fpn.out_channels
    opts.take("inplanes", cin, types=(int, list), check=lambda v: None if v in (cin, [cin] * levels) else
              f"the FPN gives {cin} channels")
    num_classes = opts.take("num_classes", types=int, check=lambda v: None if v >= 2 else "counts the background "
                            "too: at least 2")
    towers = []
    for side in ("cls", "box"):
        if sizes is None:
            depth = _ints(opts, f"depth_{side}", 1, default=[4])
            channels = _ints(opts, f"out_channel_{side}", 1, default=[256])
        else:
            depth, channels = sizes["depth"], sizes["out_channel"]
        towers.append((channels[0], depth[0]))
    opts.take("feat_planes", towers[0][0], types=int, only=towers[0][0], why="the class tower's out_channel_cls"
              if sizes is None else "the towers' largest out_channel")
    opts.take("num_conv", towers[0][1], types=int, only=towers[0][1], why="depth_cls" if sizes is None else
              "the towers' largest depth")
    kernel = _ints(opts, "kernel_size", 1, default=[3])[0] if sizes is None else sizes["kernel_size"][0]
    if kernel % 2 == 0:
        raise ConfigError(opts.at("kernel_size"), f"{kernel}: kernel sizes are odd")
    opts.take("num_level", levels, types=int, only=levels, why=f"the FPN gives {levels} levels")
    opts.take("class_activation", "sigmoid", types=str, only="sigmoid", why="QFL scores classes with sigmoids")
    prior = opts.take("init_prior", 0.01, types=float, check=lambda v: None if 0 < v < 1 else "must be in (0, 1)")
    num_anchors = opts.take("num_anchors", None, types=(int, type(None)))
    opts.take("share_subnet", False, types=bool, only=False, why="separate class and box towers")
    opts.take("pred_conv_kernel_size", 3, types=int, only=3)
    norm, sync = _norm(opts)
    init = read_initializer(opts)
    opts.done()

    def build(anchors):
        if num_anchors is not None and num_anchors != anchors:
            raise ConfigError(opts.at("num_anchors"), f"{num_anchors} but anchor_ratios x anchor_scales give "
                              f"{anchors}")
        if sizes is None:
            head = BigNASRetinaHead(cin, num_classes - 1, anchors, levels, kernel, towers[0], towers[1], norm, prior)
        else:
            head = ElasticRetinaHead(cin, num_classes - 1, anchors, levels, towers[0][1], towers[0][0], kernel, norm,
                                     prior)
        if init is not None:
            initialize(head, init)
            head.init_prior(prior)
        return head
    return build, num_classes, sync


def build_bignas_net(net_cfg, path):
    from ..det.atss import RetinaPlusCriterion, RetinaPlusModel, RetinaPlusPredictor, box_coder
    from .atss_net import read_post
    from .bignas_weights import slice_supernet
    from .det_parts import up_cell_anchors

    from .bignas_sampling import largest
    from .bignas_supernet import BigNASSupernet, read_space

    types = tuple(e["type"] for e in net_cfg)
    if types[:3] not in (PARTS, SUPERNET_PARTS) or len(types) != 4 or types[3] != "retina_post":
        raise ConfigError(path, f"the UP parts {' + '.join(types)} do not form a mapped BigNAS net",
                          f"mapped: {' + '.join(PARTS)} + retina_post (a subnet), {' + '.join(SUPERNET_PARTS)} + "
                          "retina_post (the supernet)")
    opts = entry_options(net_cfg, path)
    from .bignas_flops import read_sampling

    space, schedule = read_space(opts) if types[:3] == SUPERNET_PARTS else (None, None)
    sampling = read_sampling(opts[0]) if space is not None else None
    # UP's sample_accuracy (a supernet) / evaluate_subnet's calib_bn (a subnet): config/up_bignas.py
    accuracy = opts[0].take("bignas_sample_accuracy", None, types=(dict, type(None))) if space is not None else None
    calib_bn = opts[0].take("bignas_calib_bn", False, types=bool) if space is None else False
    sizes = [None] * 3 if space is None else [largest(space[i]) for i in range(3)]
    trunk, sync = read_trunk(opts[0], sizes[0])
    fpn = read_fpn(opts[1], trunk, sizes[1])
    levels = len(fpn.out_strides)
    build_head, num_classes, head_sync = read_head(opts[2], fpn, levels, sizes[2])
    post = read_post("retina_post", opts[3], num_classes, False, join_path(join_path(path, 3), "type"))
    # UP's static head defaults to 9 anchors, which its own subnet file (2 anchors) cannot run
    # with: the count follows the anchor generator unless given
    head = build_head(len(post["ratios"]) * len(post["scales"]))
    coder = box_coder()
    criterion = RetinaPlusCriterion(coder, post["top_k"], post["beta"], post["cls_weight"], post["giou_weight"],
                                    post["l1_weight"], dynamic_norm=post["dynamic_norm"])
    cells = [up_cell_anchors(s, post["ratios"], post["scales"]) for s in fpn.out_strides]
    parts = (trunk, fpn, head, criterion, RetinaPlusPredictor(coder, **post["predictor"]), fpn.out_strides, cells)
    if space is None:
        from .bignas_accuracy import CalibratedSubnet

        model = (CalibratedSubnet if calib_bn else RetinaPlusModel)(*parts, class_first=post["class_first"],
                                                                     neck_takes_list=True)
    else:  # BatchNorm runs on slices of its statistics: not converted to SyncBatchNorm
        model = BigNASSupernet(*parts, class_first=post["class_first"], neck_takes_list=True, space=space,
                               schedule=schedule, sampling=sampling, accuracy=accuracy)
        sync = head_sync = None
    model.num_classes_counts_background = True
    model.num_classes_path = join_path(join_path(path, 2), "kwargs.num_classes")
    model.sync_bn_group_size = sync if sync is not None else head_sync
    model.up_part_names = [e["name"] for e in net_cfg]
    model.translate_up_weights = partial(slice_supernet, model=model, names=model.up_part_names[:3])
    return model
