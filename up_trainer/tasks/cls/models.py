"""Every torchvision classification architecture, registered under its torchvision name.

``net: {type: resnet18, kwargs: {num_classes: 10, in_channels: 1, small_input: true}}``
builds a :class:`ClassificationModel` whose only child is the torchvision network, named
``backbone`` (hooks address modules by top-level name). ``pretrained`` is ``imagenet``
(torchvision's DEFAULT weights of the architecture), a torchvision weights name or a local
file (:mod:`up_trainer.pretrained`), loaded tolerantly.
"""
import logging
import math
from typing import Optional

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from ...errors import ConfigError, DataError
from ...registry import MODELS
from ...weights import load_fitting, load_weights

log = logging.getLogger("up")

# Resolved at import of this module (the registry imports it on first lookup), so the list
# follows whatever torchvision is installed.
ARCHS = tuple(torchvision.models.list_models(module=torchvision.models))

# Constructor arguments some architectures need to behave like the others: plain logits out
# of forward() in training mode, and no "init_weights will change" warning.
_ARCH_DEFAULTS = {
    "googlenet": {"aux_logits": False, "init_weights": True},
    "inception_v3": {"aux_logits": False, "init_weights": True},
}
_IMAGE_SIZE_ARG = {"vit": "image_size", "maxvit": "input_size"}


def _family(arch):
    for prefix in ("wide_resnet", "resnext", "resnet", "regnet", "densenet", "mobilenet", "efficientnet",
                   "mnasnet", "shufflenet", "maxvit", "vit", "swin", "convnext", "vgg", "squeezenet"):
        if arch.startswith(prefix):
            return prefix
    return arch


# -- stems for tiny images (CIFAR-style): keep resolution instead of dividing it by 4 ---------
def _conv3x3_s1(conv):
    return nn.Conv2d(conv.in_channels, conv.out_channels, 3, 1, 1, bias=conv.bias is not None)


def _stride1(conv):
    conv.stride = (1, 1)  # same weights, no downsampling


def _resnet_stem(net):
    net.conv1 = _conv3x3_s1(net.conv1)
    net.maxpool = nn.Identity()


def _densenet_stem(net):
    net.features.conv0 = _conv3x3_s1(net.features.conv0)
    net.features.pool0 = nn.Identity()


def _shufflenet_stem(net):
    _stride1(net.conv1[0])
    net.maxpool = nn.Identity()


_SMALL_STEMS = {
    "resnet": _resnet_stem, "resnext": _resnet_stem, "wide_resnet": _resnet_stem,
    "regnet": lambda net: _stride1(net.stem[0]),
    "densenet": _densenet_stem,
    "mobilenet": lambda net: _stride1(net.features[0][0]),
    "efficientnet": lambda net: _stride1(net.features[0][0]),
    "mnasnet": lambda net: _stride1(net.layers[0]),
    "shufflenet": _shufflenet_stem,
}


def first_conv(module):
    """(name, parent, attribute, conv) of the first Conv2d in registration order: the stem."""
    for name, mod in module.named_modules():
        if isinstance(mod, nn.Conv2d):
            parent_name, _, attr = name.rpartition(".")
            return name, module.get_submodule(parent_name), attr, mod
    raise ValueError(f"{type(module).__name__} has no Conv2d")


def _replace_in_channels(net, arch, in_channels):
    _, parent, attr, conv = first_conv(net)
    new = nn.Conv2d(in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                    conv.dilation, conv.groups, conv.bias is not None, conv.padding_mode)
    # Initialise as torchvision initialises that stem (ViT's patch projection differs).
    if _family(arch) == "vit":
        fan_in = new.in_channels * new.kernel_size[0] * new.kernel_size[1]
        nn.init.trunc_normal_(new.weight, std=math.sqrt(1 / fan_in))
    else:
        nn.init.kaiming_normal_(new.weight, mode="fan_out", nonlinearity="relu")
    if new.bias is not None:
        nn.init.zeros_(new.bias)
    setattr(parent, attr, new)


def adapt_stem_weight(weight, in_channels):
    """Pretrained RGB stem weights for another channel count (sum for gray, tiled otherwise)."""
    if in_channels == 1:
        return weight.sum(dim=1, keepdim=True)
    reps = math.ceil(in_channels / weight.shape[1])
    return weight.repeat(1, reps, 1, 1)[:, :in_channels] * (weight.shape[1] / in_channels)


def _strip_prefix(key):
    for prefix in ("module.", "backbone."):  # DDP-saved files, then our own checkpoints
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key


class ClassificationModel(nn.Module):
    """A torchvision classifier (``self.backbone``) taking and returning dicts.

    forward(batch): ``batch["image"]`` float NxCxHxW, ``batch["label"]`` int64 N (optional in
    eval). Training returns ``{logits, loss}``; eval returns ``{logits, scores, preds}`` and
    ``loss`` when labels are present.
    """

    def __init__(self, arch, num_classes=1000, in_channels=3, small_input=False, pretrained=None,
                 label_smoothing=0.0, image_size=None, arch_kwargs=None):
        super().__init__()
        if num_classes < 1:
            raise ConfigError("num_classes", f"must be >= 1, got {num_classes}")
        if in_channels < 1:
            raise ConfigError("in_channels", f"must be >= 1, got {in_channels}")
        if not 0.0 <= label_smoothing < 1.0:
            raise ConfigError("label_smoothing", f"must be in [0, 1), got {label_smoothing}")
        family = _family(arch)
        kwargs = dict(_ARCH_DEFAULTS.get(arch, {}))
        kwargs.update(arch_kwargs or {})
        if image_size is not None:
            if family not in _IMAGE_SIZE_ARG:
                raise ConfigError("image_size", f"{arch} adapts to any input size; only vit_* and maxvit_t "
                                  "take image_size", "remove image_size")
            kwargs[_IMAGE_SIZE_ARG[family]] = image_size if family == "vit" else (image_size, image_size)
        try:
            net = torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **kwargs)
        except TypeError as exc:
            raise ConfigError("arch_kwargs", f"torchvision {arch}: {exc}") from None
        except (ValueError, AssertionError) as exc:  # e.g. a ViT image_size the patch size does not divide
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError("image_size" if image_size is not None else None, f"torchvision {arch}: {first}") from None
        if small_input:
            if family not in _SMALL_STEMS:
                supported = ", ".join(sorted(_SMALL_STEMS))
                raise ConfigError("small_input", f"{arch} has no small-input stem",
                                  f"supported families: {supported}; or resize the images instead")
            _SMALL_STEMS[family](net)
        if in_channels != 3:
            _replace_in_channels(net, arch, in_channels)
        self.backbone = net
        self.arch = arch
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.label_smoothing = label_smoothing
        self.pretrained_report = None
        from ...pretrained import weights_path

        pretrained = weights_path(pretrained, "pretrained", imagenet=arch, coco="torchvision's COCO weights are "
                                  "detectors'; a classifier takes imagenet")
        if pretrained:
            from ...errors import CheckpointError

            try:
                self.pretrained_report = self.load_pretrained(pretrained)
            except CheckpointError as exc:
                raise ConfigError("pretrained", str(exc)) from None

    def load_pretrained(self, path):
        """Load what fits from a local weights file; report (never fail on) the rest. A stem
        saved for another channel count is adapted (see :func:`adapt_stem_weight`)."""
        state = {_strip_prefix(k): v for k, v in load_weights(path).items()}
        stem_key = first_conv(self.backbone)[0] + ".weight"

        def adapt(key, value, want):
            if key != stem_key or value.dim() != 4 or value.shape[0] != want[0] or value.shape[2:] != want[2:]:
                return None
            log.info("pretrained %s: adapted %s from %d to %d input channels", path, key, value.shape[1], want[1])
            return adapt_stem_weight(value, want[1])

        return load_fitting(self.backbone, state, f"pretrained {path}", adapt=adapt)

    def forward(self, batch):
        if isinstance(batch, torch.Tensor):
            batch = {"image": batch}
        image = batch["image"]
        if image.dim() == 4 and image.shape[1] != self.in_channels:
            raise ConfigError(None, f"{self.arch} expects {self.in_channels}-channel images, the batch has "
                              f"{image.shape[1]}", "set the net's in_channels or the dataset's color_mode")
        label = batch.get("label")
        if label is None and self.training:
            raise DataError("the training images have no labels (an inference_only meta file?): "
                            "training needs a label per image")
        logits = self.backbone(image)
        out = {"logits": logits}
        if label is not None:
            out["loss"] = F.cross_entropy(logits, label, label_smoothing=self.label_smoothing)
        if not self.training:
            scores = logits.softmax(dim=1)
            out["scores"] = scores
            out["preds"] = scores.argmax(dim=1)
        return out


def _make_builder(arch):
    # One function per architecture with typed kwargs, so the registry checks YAML values
    # against this signature before anything is built.
    def build(num_classes: int = 1000, in_channels: int = 3, small_input: bool = False,
              pretrained: Optional[str] = None, label_smoothing: float = 0.0,
              image_size: Optional[int] = None, arch_kwargs: Optional[dict] = None):
        return ClassificationModel(arch, num_classes=num_classes, in_channels=in_channels,
                                   small_input=small_input, pretrained=pretrained,
                                   label_smoothing=label_smoothing, image_size=image_size,
                                   arch_kwargs=arch_kwargs)

    build.__name__ = build.__qualname__ = arch
    build.__doc__ = (f"torchvision {arch} as a classifier. image_size: vit_*/maxvit_t only; "
                     "arch_kwargs: extra torchvision constructor arguments (e.g. dropout).")
    build.is_classifier = True  # lets build_model recognise a complete classification net
    return build


for _arch in ARCHS:
    MODELS.register(_arch)(_make_builder(_arch))
