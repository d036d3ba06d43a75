"""Published weights by name: where each file comes from and where it is kept.

Two sources, each through what owns it. torchvision's weights API names its files
(``ResNet18_Weights.IMAGENET1K_V1``): :func:`torchvision.models.get_weight` gives the URL,
whose file name ends in the first hex digits of the file's sha256 (``resnet18-f37072fd.pth``),
the digits torch.hub's ``check_hash`` compares. Megvii's YOLOX release (0.1.1rc0) publishes
``yolox_nano.pth`` ... ``yolox_x.pth`` with no hash and no size: such a file is checked by what
it holds (see :mod:`.cache`). Both are kept where torch.hub keeps them,
``<torch.hub.get_dir()>/checkpoints/<file name>`` (``$TORCH_HOME/hub/checkpoints``), so a
file torch.hub or YOLOX's own code already downloaded is found, and the other way round.
"""
import os
import re
from dataclasses import dataclass, replace
from typing import Optional
from urllib.parse import urlparse

from ..errors import ConfigError, did_you_mean

# The ImageNet backbones the detectors build (tasks/det/models.py BACKBONES); any torchvision
# classifier's weights are reachable by their full name too.
DETECTOR_BACKBONES = ("resnet18", "resnet34", "resnet50", "mobilenet_v3_large")
# torchvision's COCO detectors whose architecture ours builds with default kwargs:
# (net type, backbone) -> weights name.
COCO_DETECTORS = {
    ("fcos", "resnet50"): "FCOS_ResNet50_FPN_Weights.COCO_V1",
    ("retinanet", "resnet50"): "RetinaNet_ResNet50_FPN_Weights.COCO_V1",
    ("faster_rcnn", "resnet50"): "FasterRCNN_ResNet50_FPN_Weights.COCO_V1",
    ("faster_rcnn", "mobilenet_v3_large"): "FasterRCNN_MobileNet_V3_Large_FPN_Weights.COCO_V1",
    ("ssdlite", "mobilenet_v3_large"): "SSDLite320_MobileNet_V3_Large_Weights.COCO_V1",
}
YOLOX_RELEASE = "https://github.com/Megvii-BaseDetection/YOLOX/releases/download/0.1.1rc0"
YOLOX_SIZES = ("nano", "tiny", "s", "m", "l", "x")
ALIASES = ("imagenet", "coco")
OFF = ("none", "null", "")  # the value that turns pretrained weights off (as YAML's null does)
_HASH_IN_NAME = re.compile(r"-([a-f0-9]+)\.")  # torch.hub's HASH_REGEX
_TORCHVISION_NAME = re.compile(r"^\w+_Weights\.\w+$")


@dataclass(frozen=True)
class WeightsFile:
    """One published file. ``sha256_prefix``: the digits its name carries (None: unpublished);
    ``size_mb``: the published size in MiB, torchvision's ``_file_size`` (None: unpublished)."""

    name: str
    url: str
    use: str  # what it is for, as `up weights list` shows it
    sha256_prefix: Optional[str] = None
    size_mb: Optional[float] = None

    @property
    def file_name(self):
        return os.path.basename(urlparse(self.url).path)

    @property
    def cache_path(self):
        import torch.hub

        return os.path.join(torch.hub.get_dir(), "checkpoints", self.file_name)


def torchvision_file(name, key=None):
    """The WeightsFile of a torchvision weights name (``ResNet18_Weights.IMAGENET1K_V1``)."""
    from torchvision.models import get_weight, list_models

    try:
        weights = get_weight(name)
    except (ValueError, KeyError, AttributeError):
        known = [str(w) for m in list_models() for w in _model_weights(m)]
        raise ConfigError(key, f"{name!r} is not a torchvision weights name", did_you_mean(name, known)) from None
    url = weights.url
    found = _HASH_IN_NAME.search(os.path.basename(urlparse(url).path))
    size = weights.meta.get("_file_size")
    return WeightsFile(str(weights), url, _use_of(weights), found.group(1) if found else None,
                       float(size) if size is not None else None)


def _model_weights(model):
    from torchvision.models import get_model_weights

    try:
        return list(get_model_weights(model))
    except (ValueError, KeyError):
        return []


def _use_of(weights):
    name = str(weights)
    data = "COCO" if ".COCO" in name else "ImageNet" if ".IMAGENET" in name else "published"
    return f"{data} {type(weights).__name__[:-len('_Weights')]}"


def yolox_file(size):
    return WeightsFile(f"yolox_{size}", f"{YOLOX_RELEASE}/yolox_{size}.pth", f"COCO yolox size {size}")


def imagenet_name(arch):
    """The torchvision weights ``imagenet`` means for ``arch``: its DEFAULT (the best published)."""
    from torchvision.models import get_model_weights

    try:
        return str(get_model_weights(arch).DEFAULT)
    except (ValueError, KeyError, AttributeError):
        return None


def listed():
    """What `up weights list` shows, each with what names it: ImageNet weights of the
    detectors' backbones, torchvision's COCO detectors we build, and YOLOX's release files."""
    out = [replace(torchvision_file(imagenet_name(arch)), use=f"imagenet, backbone {arch}")
           for arch in DETECTOR_BACKBONES]
    out += [replace(torchvision_file(name), use=f"coco, {kind} on {backbone}")
            for (kind, backbone), name in COCO_DETECTORS.items()]
    return out + [replace(yolox_file(size), use=f"coco, yolox size {size}") for size in YOLOX_SIZES]


def lookup(name, key=None):
    """The WeightsFile a full name names (a torchvision weights name or ``yolox_<size>``), or
    None when ``name`` is no such name (then it is a local file path)."""
    if name.startswith("yolox_") and name[len("yolox_"):] in YOLOX_SIZES:
        return yolox_file(name[len("yolox_"):])
    if _TORCHVISION_NAME.match(name):
        return torchvision_file(name, key)
    return None


# torchvision's COCO Faster R-CNN on ResNet-50 feeds all four stages to its FPN (ours: 2-4 by default)
COCO_STAGES = {("faster_rcnn", "resnet50"): [1, 2, 3, 4]}


def coco_detector(kind, backbone, returned_layers=None):
    """The torchvision COCO weights name of our ``kind`` on ``backbone``, or why there is none."""
    name = COCO_DETECTORS.get((kind, backbone))
    stages = COCO_STAGES.get((kind, backbone))
    if name and stages and list(returned_layers or ()) != stages:
        return f"torchvision's COCO {kind} on {backbone} has an FPN over stages {stages}: set returned_layers: {stages}"
    if name:
        return name
    fits = [b for k, b in COCO_DETECTORS if k == kind]
    return (f"torchvision publishes COCO {kind} weights for backbone {' or '.join(fits)} only, not {backbone}"
            if fits else f"torchvision publishes no COCO {kind} weights")


def by_alias(value, key, imagenet=None, coco=None):
    """The WeightsFile ``imagenet`` / ``coco`` means here: ``imagenet`` names the architecture
    whose ImageNet weights are meant, ``coco`` the full name meant; either may instead be a
    sentence saying why there are none here (refused with it), or None."""
    meant = imagenet if value == "imagenet" else coco
    if value == "imagenet" and meant and not _is_reason(meant):
        meant = imagenet_name(meant) or f"torchvision has no ImageNet weights for {meant}"
    if not meant or _is_reason(meant):
        raise ConfigError(key, f"{value!r}: {meant or f'no {value} weights fit here'}",
                          "up weights list shows the names; a local file works too")
    return lookup(meant, key)


def _is_reason(text):
    return " " in text  # names have no spaces; the sentences saying why there is none do
