"""The modules that get exported: a tensor in, tensors out, no dicts.

* :class:`ClassifierGraph`: image batch (the tensor the test dataset yields, its transforms
  applied) -> ``logits``, ``scores`` (softmax).
* :class:`DenseHeadsGraph` (RetinaNet, FCOS): image batch in [0, 1] at the export size ->
  the head's raw outputs, the detector's normalisation inside the graph, plus the anchors of
  that size. :mod:`.decode` turns them into boxes exactly as torchvision does.
* :func:`scripted_detector`: the whole torchvision detector, post-processing included,
  compiled by TorchScript: a list of CxHxW images in [0, 1] (any sizes, any count) ->
  one ``{boxes, scores, labels}`` per image in the input's pixels.
"""
import copy
from typing import Dict, List

import torch
from torch import nn

DENSE_KINDS = ("retinanet", "fcos")


def is_detector(model):
    return hasattr(model, "detector")


class ClassifierGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        heads = getattr(model, "num_classes", None)
        if isinstance(heads, list):  # UP's multi-head classification: one (logits, scores) pair per head
            from ..errors import ConfigError

            raise ConfigError("net", f"export writes one classifier's logits and scores; this net has {len(heads)} "
                              "heads (UP's multi-head form)", "evaluate it with up eval: top-k per head")
        self.model = model

    def forward(self, image):
        logits = self.model({"image": image})["logits"]
        return logits, logits.softmax(dim=1)


def head_output_names(kind):
    return ["cls_logits", "bbox_regression"] + (["bbox_ctrness"] if kind == "fcos" else [])


class DenseHeadsGraph(nn.Module):
    """Backbone, FPN and dense head of a RetinaNet / FCOS at one input size.

    Outputs, in order: ``cls_logits`` [N, A, K], ``bbox_regression`` [N, A, 4], for FCOS
    ``bbox_ctrness`` [N, A, 1], and ``anchors`` [A, 4] (xyxy, export-size pixels), with A the
    anchors of every level concatenated and K the classes including torchvision's background.
    ``dynamic``: the anchors come from the detector's anchor generator inside the graph, at the
    size of the input, and a last output ``anchors_per_level`` [L] (int64) says how A splits.
    """

    def __init__(self, model, height, width, dynamic=False):
        super().__init__()
        from torchvision.models.detection.image_list import ImageList

        det = model.detector
        self.kind, self.dynamic = model.kind, dynamic
        self.anchor_generator = det.anchor_generator
        self.features, self.head = det.backbone, det.head  # the model's own proxies: call by name
        self._modules_of_model = model  # registered: its parameters are the graph's
        t = det.transform
        self.register_buffer("mean", torch.tensor(t.image_mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(t.image_std, dtype=torch.float32).view(1, -1, 1, 1))
        with torch.no_grad():
            probe = torch.zeros(1, 3, height, width)
            feats = list(self.features(self._normalise(probe)).values())
            anchors = det.anchor_generator(ImageList(probe, [(height, width)]), feats)[0]
        self.register_buffer("anchors", anchors.float())
        per_level = [f.shape[-2] * f.shape[-1] for f in feats]
        self.per_location = anchors.shape[0] // sum(per_level)
        self.num_anchors_per_level = [n * self.per_location for n in per_level]
        self.output_names = head_output_names(self.kind) + ["anchors"] + (["anchors_per_level"] if dynamic else [])

    def _normalise(self, image):
        return (image - self.mean) / self.std

    def run(self, image):
        """(head outputs, anchors [A, 4], anchors of each level)."""
        from torchvision.models.detection.image_list import ImageList

        from .shapes import map_count

        x = self._normalise(image)
        feats = list(self.features(x).values())
        out = self.head(feats)
        heads = tuple(out[k] for k in head_output_names(self.kind))
        if not self.dynamic:
            return heads, self.anchors * 1.0, self.num_anchors_per_level
        anchors = self.anchor_generator(ImageList(x, [tuple(x.shape[-2:])]), feats)[0].float()
        return heads, anchors, [map_count(f, self.per_location) for f in feats]

    def forward(self, image):
        from .shapes import sizes_tensor

        heads, anchors, counts = self.run(image)
        return heads + ((anchors, sizes_tensor(counts)) if self.dynamic else (anchors,))


class _DetectionsOnly(nn.Module):
    """TorchScript's detectors return (losses, detections); users want the detections."""

    def __init__(self, detector):
        super().__init__()
        self.detector = detector

    def forward(self, images: List[torch.Tensor]) -> List[Dict[str, torch.Tensor]]:
        return self.detector(images)[1]


def _real_module(model, proxy):
    """The modules a name proxy calls, as one scriptable Sequential (None if one is not a module)."""
    parts = [getattr(model, name) for name in proxy._names]
    if not all(isinstance(p, nn.Module) for p in parts):
        return None
    seq = parts[0] if len(parts) == 1 else nn.Sequential(*parts)
    return seq


def scripted_detector(model):
    """The torchvision detector of ``model`` compiled with post-processing, or raise
    RuntimeError naming why it cannot be."""
    det = copy.copy(model.detector)  # shallow: shares every parameter with the model
    det._modules = dict(det._modules)
    for name in ("backbone", "head", "rpn", "roi_heads"):
        proxy = det._modules.get(name)
        if proxy is None or not hasattr(proxy, "_names"):
            continue
        real = _real_module(model, proxy)
        if real is None:
            raise RuntimeError(f"the detector's {name} is not made of modules only")
        if hasattr(proxy, "out_channels"):
            real.out_channels = proxy.out_channels
        det._modules[name] = real
    det.eval()
    return torch.jit.script(_DetectionsOnly(det))
