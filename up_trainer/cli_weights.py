"""`up weights list|fetch`: the published weights `pretrained` names, where each file goes and
whether it is there; and `up train --pretrained imagenet|coco|none|FILE`, mapped onto the net's
kwargs (:func:`apply_pretrained`)."""
import inspect
import os

import click

from .errors import ConfigError
from .exits import run_safely

PRETRAINED_HELP = ("imagenet: the backbone's ImageNet weights (torchvision); coco: the whole detector's COCO "
                   "weights where published; none: from scratch; or a weights name (up weights list) or a "
                   "local file (a whole model's). Sets the net's pretrained / pretrained_backbone")


def pretrained_option(fn):
    return click.option("--pretrained", "pretrained", default=None, metavar="imagenet|coco|none|FILE",
                        help=PRETRAINED_HELP)(fn)


def apply_pretrained(cfg, value):
    """``cfg`` with ``--pretrained value`` written into ``net.kwargs``: ``imagenet`` (or an
    ImageNet weights name) into ``pretrained_backbone`` where the net has one, else into
    ``pretrained``; ``coco``, a COCO name or a file into ``pretrained``; ``none`` clears both."""
    if value is None:
        return cfg
    from .pretrained import lookup
    from .registry import MODELS

    net = cfg.get("net")
    if not isinstance(net, dict) or not isinstance(net.get("type"), str):
        raise ConfigError("--pretrained", "sets a net: {type, kwargs} entry's weights; a UP net list takes "
                          "--opts saver.pretrain_model=FILE")
    params = inspect.signature(MODELS.get(net["type"], "net.type")).parameters
    keys = [k for k in ("pretrained_backbone", "pretrained") if k in params]
    if not keys:
        raise ConfigError("--pretrained", f"net type {net['type']!r} takes no pretrained weights")
    text = str(value).strip()
    kwargs = dict(net.get("kwargs") or {})
    if text.lower() == "none":
        kwargs.update({k: None for k in keys})
    else:
        entry = lookup(text, "--pretrained") if text.lower() not in ("imagenet", "coco") else None
        backbone_weights = text.lower() == "imagenet" or (entry is not None and ".IMAGENET" in entry.name)
        kwargs[keys[0] if backbone_weights else keys[-1]] = text
    return {**cfg, "net": {**net, "kwargs": kwargs}}


@click.group("weights")
def weights_group():
    """Published pretrained weights: list them, download them ahead of a run."""


@weights_group.command("list")
@click.option("--urls", is_flag=True, help="print 'URL PATH' per file instead (for placing files by hand)")
@run_safely
def weights_list(urls):
    """Names, sizes, where each file goes (torch.hub's cache under TORCH_HOME), whether it is there."""
    from .pretrained import listed

    entries = listed()
    if urls:
        for e in entries:
            click.echo(f"{e.url} {e.cache_path}")
        return
    rows = [(e.name, e.use, _size(e), "yes" if os.path.isfile(e.cache_path) else "no", e.file_name)
            for e in entries]
    head = ("name", "weights", "size", "present", "file")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for row in [head] + rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    import torch.hub

    click.echo(f"files go in {os.path.join(torch.hub.get_dir(), 'checkpoints')} (set TORCH_HOME to move it); "
               "in YAML: pretrained_backbone: imagenet, pretrained: coco, or a name above")


def _size(entry):
    if os.path.isfile(entry.cache_path):
        return f"{os.path.getsize(entry.cache_path) / 2**20:.1f} MiB"
    return f"{entry.size_mb:.1f} MiB" if entry.size_mb is not None else "unpublished"


@weights_group.command("fetch")
@click.argument("names", nargs=-1, required=True)
@run_safely
def weights_fetch(names):
    """Download NAMES (from `up weights list`, or any torchvision weights name) into the cache,
    verified; a file already there is verified only."""
    from .pretrained import local_file, lookup

    entries = []
    for name in names:
        entry = lookup(name)
        if entry is None:
            raise ConfigError(None, f"{name!r} is no published weights name", "up weights list shows them")
        entries.append(entry)
    for entry in entries:
        present = os.path.isfile(entry.cache_path)
        path = local_file(entry)
        checked = f"sha256 prefix {entry.sha256_prefix} verified" if entry.sha256_prefix else \
            "zip CRC32s verified; no hash is published"
        click.echo(f"{entry.name}: {path} ({'already there, ' if present else ''}{checked})")
