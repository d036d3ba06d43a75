"""Pretrained weights by name: ``imagenet``, ``coco``, a torchvision weights name
(``ResNet18_Weights.IMAGENET1K_V1``), a YOLOX release name (``yolox_s``), or a local file.

Every builder's ``pretrained`` / ``pretrained_backbone`` goes through :func:`weights_path`,
which turns a name into a verified file in torch.hub's cache (:mod:`.cache`, :mod:`.catalog`)
and passes anything else through unchanged: a local file loads exactly as it always did.
"""
from .cache import OFFLINE_ENV, local_file, offline, verify
from .catalog import ALIASES, OFF, WeightsFile, by_alias, listed, lookup

__all__ = ["ALIASES", "OFFLINE_ENV", "WeightsFile", "listed", "local_file", "lookup", "offline", "verify",
           "weights_path"]


def weights_path(value, key, imagenet=None, coco=None):
    """The file a ``pretrained``-like value names, or None for no weights.

    ``key``: the kwarg, for error lines. ``imagenet``: the architecture whose ImageNet weights
    ``imagenet`` means here (None: it means nothing here). ``coco``: the full name ``coco``
    means here, or a sentence saying why there is none.
    """
    if value is None:
        return None
    text = str(value).strip()
    if text.lower() in OFF:
        return None
    entry = by_alias(text.lower(), key, imagenet, coco) if text.lower() in ALIASES else lookup(text, key)
    if entry is None:
        return value  # a local file: loaded as before, by weights.load_weights
    return local_file(entry, key)
