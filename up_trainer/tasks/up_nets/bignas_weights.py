"""A BigNAS supernet checkpoint sliced into a subnet, by UP's rule: each stage's first blocks,
each tensor's first channels and the centre of each kernel.

A supernet checkpoint is recognised by its dynamic parts' names: every first block of a trunk
stage has a 1x1 shortcut stored as ``blocks.N.shortcut.weight`` / ``blocks.N.shortcutbn.*``
(a static subnet stores ``blocks.N.shortcut.conv.weight`` / ``.bn.*``), and the head's
prediction convs are ``cls_subnet_pred.conv.*``. Those first blocks also give the supernet's
stage boundaries, so block ``j`` of the subnet's stage ``s`` reads the ``j``-th block of the
supernet's stage ``s``. Tensors whose supernet shape is smaller than the subnet's are left as
they are, for the tolerant loader to report (``saver.pretrain_model``). Any other checkpoint
(a subnet's own, UP's or ours) passes through with UP's entry names mapped only.
"""
import logging
import re

log = logging.getLogger("up")


def _block_re(prefix):
    return re.compile(rf"^{re.escape(prefix)}\.blocks\.(\d+)\.(.*)$")


def _rename_entries(state, names):
    prefixes = {f"{up}.": f"{own}." for up, own in zip(names, ("backbone", "neck", "roi_head")) if up != own}
    return {next((prefixes[p] + k[len(p):] for p in prefixes if k.startswith(p)), k): v for k, v in state.items()}


def is_supernet(state, prefix="backbone"):
    return any(re.match(rf"^{re.escape(prefix)}\.blocks\.\d+\.shortcutbn\.", k) or
               k.startswith("roi_head.cls_subnet_pred.conv.") for k in state)


def _supernet_stages(state, block):
    """[[block index, ...] per trunk stage 1..4] from the stage-first blocks' shortcuts."""
    indices = sorted({int(m.group(1)) for m in map(block.match, state) if m})
    firsts = {int(m.group(1)) for m in map(block.match, state) if m and m.group(2).startswith("shortcut.weight")}
    stages = []
    for i in indices:
        if i in firsts or not stages:
            stages.append([])
        stages[-1].append(i)
    return stages


def _blocks(state, trunk, prefix, static):
    """The trunk's block keys renumbered from the supernet's stages to the subnet's (and, for
    a ``static`` subnet, the shortcut renamed to its conv block)."""
    block = _block_re(prefix)
    starts = [0] + [end + 1 for end in trunk.stage_ends[:-1]]
    super_stages = _supernet_stages(state, block)
    mapping = {}
    for stage, (start, end) in enumerate(zip(starts, trunk.stage_ends)):
        sources = super_stages[stage] if stage < len(super_stages) else []
        for j, own in enumerate(range(start, end + 1)):
            if j < len(sources):
                mapping[sources[j]] = own
    out, unused = {}, set()
    for key, value in state.items():
        m = block.match(key)
        if not m:
            out[key] = value
            continue
        if int(m.group(1)) not in mapping:
            unused.add(int(m.group(1)))  # deeper than the subnet's stage
            continue
        rest = m.group(2)
        if static:
            rest = re.sub(r"^shortcut\.weight$", "shortcut.conv.weight", rest)
            rest = re.sub(r"^shortcutbn\.", "shortcut.bn.", rest)
        out[f"{prefix}.blocks.{mapping[int(m.group(1))]}.{rest}"] = value
    if unused:
        log.info("supernet checkpoint: blocks %s are deeper than the subnet's stages; not used", sorted(unused))
    return out


def _slice(value, shape):
    """The first rows/channels of ``value`` and the centre of its kernel, to ``shape`` (None
    when the supernet's tensor is smaller somewhere)."""
    if value.dim() != len(shape) or any(a < b for a, b in zip(value.shape, shape)):
        return None
    index = [slice(0, n) for n in shape]
    if value.dim() == 4:
        for d in (2, 3):
            start = (value.shape[d] - shape[d]) // 2
            index[d] = slice(start, start + shape[d])
    return value[tuple(index)].clone()


def slice_supernet(state, model, names, static=True):
    """``state`` with UP's entry names mapped and, when it is a supernet checkpoint, sliced to
    ``model``'s shapes. ``static``: the detection model of UP's static subnet parts (entries
    renamed backbone / neck / roi_head); otherwise an elastic model whose space is smaller
    (the classifier's trunk under its entry name ``names[0]``)."""
    if static:
        state = _rename_entries(state, names)
    if "bignas_step" in state and "bignas_step" not in model.state_dict():
        state = {k: v for k, v in state.items() if k != "bignas_step"}  # the supernet's sampling counter
    from .bignas_parts import BigNASResNetBasic

    prefix = "backbone" if static else names[0]
    if not is_supernet(state, prefix) or (static and not isinstance(model.backbone, BigNASResNetBasic)):
        return state  # a subnet's checkpoint, or a supernet's loading into a supernet: by name
    state = _blocks(state, getattr(model, prefix), prefix, static)
    state = {re.sub(r"^roi_head\.(cls|box)_subnet_pred\.conv\.", r"roi_head.\1_subnet_pred.", k): v
             for k, v in state.items()}
    own = model.state_dict()
    out = {}
    for key, value in state.items():
        if key in own and tuple(value.shape) != tuple(own[key].shape):
            sliced = _slice(value, tuple(own[key].shape))
            out[key] = value if sliced is None else sliced
        else:
            out[key] = value
    return out
