"""Every dense prediction of a detector as two tensors, for the end-to-end graph and the raw form.

:func:`dense_graph` wraps a trained detector of a dense family (torchvision RetinaNet, FCOS and
SSDlite, YOLOX, the ATSS RetinaNet with or without its IoU branch) as a module

    forward(image [N, 3, H, W]) -> boxes [N, A, 4] (xyxy, input pixels, not clipped),
                                   scores [N, A, K] (per-class probabilities)

at one input size (H, W), or, built with ``dynamic`` (``--dynamic-size``), at any size: the
anchors / points then come from the feature maps' shapes inside the graph, and ``forward``
returns a third tensor, ``level_sizes`` [L] (int64), the anchors of each level at that size
(:meth:`levels` gives them as a list, for :mod:`.select`). A counts the anchors / points of
every pyramid level, level after level, K the classes scored (background excluded). The input
is what the model itself receives in ``batch["image"]`` (the test dataset's model input),
padded bottom/right to (H, W); each
family's own input step (torchvision's normalisation, YOLOX's 0-255 scale, the ATSS net's
normalisation) is inside the graph. Alongside, :class:`DenseSpec` says how the model selects
detections from these tensors: per level, a threshold and a top-k (over (anchor, class) pairs
jointly or per class), then per-class NMS and the best ``detections`` per image
(:mod:`.select`). Boxes and scores are computed with the same operations, in the same order, as
the model's own post-processing, so the selection reproduces its detections.
"""
from dataclasses import asdict, dataclass, field
from typing import List

import torch
from torch import nn

from ..errors import ConfigError
from ..registry import EXPORTERS
from .shapes import map_count, sizes_tensor


@dataclass
class Level:
    """One group of consecutive anchors selected together."""
    anchors: int
    k: int  # candidates kept: jointly over (anchor, class), or per class
    thresh: float
    per_class: bool = False
    inclusive: bool = False  # score >= thresh (YOLOX) instead of > thresh
    small: int = 0  # > 0: the threshold applies only to levels of more than this many anchors (UP)


@dataclass
class DenseSpec:
    levels: List[Level] = field(default_factory=list)
    nms_thresh: float = 0.5
    detections: int = 100
    label_offset: int = 0  # label = class column + offset (1..C in the detections)
    min_size: float = 0.0  # > 0: boxes narrower or lower than this after clipping are dropped

    def to_json(self):
        return asdict(self)

    @classmethod
    def from_json(cls, data):
        return cls([Level(**lv) for lv in data["levels"]], data["nms_thresh"], data["detections"],
                   data["label_offset"], float(data.get("min_size", 0.0)))


def decode_deltas(rel, anchors, weights, clip):
    """torchvision's ``BoxCoder.decode_single`` for rel [N, A, 4] against anchors [A, 4] (or any
    shapes that broadcast, e.g. per-class deltas [R, K, 4] against RoIs [R, 1, 4]): the same
    operations in the same order."""
    widths = anchors[..., 2] - anchors[..., 0]
    heights = anchors[..., 3] - anchors[..., 1]
    ctr_x = anchors[..., 0] + 0.5 * widths
    ctr_y = anchors[..., 1] + 0.5 * heights
    wx, wy, ww, wh = weights
    dx, dy = rel[..., 0] / wx, rel[..., 1] / wy
    dw = torch.clamp(rel[..., 2] / ww, max=clip)
    dh = torch.clamp(rel[..., 3] / wh, max=clip)
    pred_ctr_x = dx * widths + ctr_x
    pred_ctr_y = dy * heights + ctr_y
    half_w = 0.5 * (torch.exp(dw) * widths)
    half_h = 0.5 * (torch.exp(dh) * heights)
    return torch.stack((pred_ctr_x - half_w, pred_ctr_y - half_h, pred_ctr_x + half_w, pred_ctr_y + half_h), -1)


class _Dense(nn.Module):
    """``forward``: boxes, scores (and ``level_sizes`` when ``dynamic``) from :meth:`levels`.

    An exporter (``EXPORTERS``): ``two_stage`` False; ``preprocess`` how images reach the graph
    (``"pad"``: padded model input; ``"torchvision"``: the detector's own transform's sizes)."""

    dynamic = False
    two_stage = False
    preprocess = "pad"

    @staticmethod
    def threshold_part(model):
        """The part of ``model`` whose ``score_thresh`` its post-processing applies."""
        return getattr(model, "postprocess", None)

    def forward(self, image):
        boxes, scores, counts = self.levels(image)
        return (boxes, scores, sizes_tensor(counts)) if self.dynamic else (boxes, scores)


@EXPORTERS.register("retinanet")
class TorchvisionDense(_Dense):
    """RetinaNet (and, below, FCOS / SSDlite): torchvision's raw heads
    (``graphs.DenseHeadsGraph``) decoded."""

    preprocess = "torchvision"
    per_class = False

    @staticmethod
    def threshold_part(model):
        return getattr(model, "detector", None)  # the top-k per class (SSDlite) instead of over (anchor, class) pairs jointly

    def __init__(self, model, height, width, dynamic=False):
        super().__init__()
        from .graphs import DenseHeadsGraph

        self.dynamic = dynamic
        self.heads = DenseHeadsGraph(model, height, width, dynamic)
        coder = model.detector.box_coder
        self.linear = hasattr(coder, "normalize_by_size")
        self.coder = coder
        det = model.detector
        k = int(det.topk_candidates)
        self.spec = DenseSpec([Level(a, k, float(det.score_thresh), self.per_class)
                               for a in self.heads.num_anchors_per_level],
                              float(det.nms_thresh), int(det.detections_per_img), 1 if self.per_class else 0)

    @staticmethod
    def scores(out):
        return torch.sigmoid(out[0])

    def levels(self, image):
        out, anchors, counts = self.heads.run(image)
        scores, reg = self.scores(out), out[1]
        if self.linear:
            boxes = self.coder.decode(reg, anchors)
        else:
            boxes = decode_deltas(reg, anchors, self.coder.weights, self.coder.bbox_xform_clip)
        return boxes, scores, counts


@EXPORTERS.register("fcos")
class TorchvisionFcosDense(TorchvisionDense):
    """torchvision's FCOS: class scores times centerness, square-rooted."""

    @staticmethod
    def scores(out):
        return torch.sqrt(torch.sigmoid(out[0]) * torch.sigmoid(out[2]))


@EXPORTERS.register("ssdlite")
class SsdliteDense(TorchvisionDense):
    """torchvision's SSDlite: softmax over the classes, top-k per class."""

    per_class = True

    @staticmethod
    def scores(out):
        return torch.softmax(out[0], dim=-1)[..., 1:]  # column 0 is the background


@EXPORTERS.register("yolox")
class YoloxDense(_Dense):
    """YOLOX: backbone, PAFPN, head; the point grid decoded (``yolox.postprocess``), every level
    one group (YOLOX ranks all points together)."""

    def __init__(self, model, height, width, dynamic=False):
        super().__init__()
        self.model, self.dynamic = model, dynamic
        post = model.postprocess
        with torch.no_grad():
            feats = model.neck(model.backbone(torch.zeros(1, 3, height, width)))
        total = sum(f.shape[-2] * f.shape[-1] for f in feats)
        self.spec = DenseSpec([Level(total, int(post.pre_nms_top_n), float(post.score_thresh), inclusive=True)],
                              float(post.nms_thresh), int(post.detections_per_img), 1)

    def levels(self, image):
        from torchvision.ops import box_convert

        from ..tasks.det.yolox.postprocess import flatten_outputs

        m = self.model
        maps = m.roi_head(m.neck(m.backbone(image * m.pixel_scale)))
        out = flatten_outputs(maps, m.strides)  # the point grid from the maps' shapes
        total = sum(map_count(cls) for cls, _, _ in maps)
        return box_convert(out["box"], "cxcywh", "xyxy"), out["cls"].sigmoid() * out["obj"].sigmoid(), [total]


@EXPORTERS.register("retina_plus")
class AtssDense(_Dense):
    """The ATSS RetinaNet (``retina_plus``): FPN head maps, UP's anchors, deltas decoded,
    scores times the IoU branch where the head has one."""

    @staticmethod
    def threshold_part(model):
        return getattr(model, "predictor", None)

    def __init__(self, model, height, width, dynamic=False):
        super().__init__()
        from ..tasks.det.anchor_predict import SMALL_LEVEL

        self.model, self.dynamic = model, dynamic
        pred = model.predictor
        with torch.no_grad():
            image = torch.zeros(1, 3, height, width)
            anchors = model.anchors(model.features(model.batch_images(image)[0]))
        self.register_buffer("anchors", torch.cat(anchors).float())
        levels = []
        for a in anchors:
            n, thresh = int(a.shape[0]), float(pred.score_thresh)
            if pred.kind == "base":
                levels.append(Level(n, min(pred.pre_nms_top_n, pred.post_nms_top_n), thresh, per_class=True,
                                    small=SMALL_LEVEL))
            else:
                levels.append(Level(n, int(pred.pre_nms_top_n), thresh, small=SMALL_LEVEL))
        self.spec = DenseSpec(levels, float(pred.nms_thresh), int(pred.detections_per_img), 1)
        self.weights, self.clip = pred.box_coder.weights, pred.box_coder.bbox_xform_clip

    def levels(self, image):
        from ..tasks.det.anchor_predict import flatten_outputs

        m = self.model
        x = image if m.image_mean is None else (image - m.image_mean) / m.image_std  # its own normalisation
        feats = m.features(x)
        out = flatten_outputs(m.roi_head(feats), m.class_first)
        scores = out["cls"].float().sigmoid()
        if out["iou"] is not None:
            scores = scores * out["iou"].float().sigmoid()[..., None]
        if self.dynamic:  # UP's anchors from the maps' shapes
            anchors = [a.float() for a in m.anchors(feats)]
            counts = [a.shape[0] for a in anchors]
            anchors = torch.cat(anchors)
        else:
            anchors, counts = self.anchors, [lv.anchors for lv in self.spec.levels]
        return decode_deltas(out["deltas"].float(), anchors, self.weights, self.clip), scores, counts


@EXPORTERS.register("up_fcos")
class UpFcosDense(_Dense):
    """UP's FCOS (``up_fcos``): backbone, FPN, head; each point's distances times its level's
    stride around the point, score sigmoid(cls) x sigmoid(centerness) (``FcosPostprocess``)."""

    def __init__(self, model, height, width, dynamic=False):
        super().__init__()
        self.model, self.dynamic = model, dynamic
        post = model.postprocess
        with torch.no_grad():
            feats = self._maps(torch.zeros(1, 3, height, width))
        points, stride = self._points(feats)
        self.register_buffer("points", points)
        self.register_buffer("stride", stride)
        # UP applies its score threshold only on maps of more than 120 points
        self.spec = DenseSpec([Level(map_count(f), int(post.pre_nms_top_n), float(post.score_thresh), per_class=True,
                                     small=120) for f in feats],
                              float(post.nms_thresh), int(post.detections_per_img), 1)

    def _points(self, maps):
        """(points [A, 2], the stride each point's distances are scaled by [A, 1]), from the maps' shapes."""
        from ..tasks.det.fcos.parts import fcos_points

        m = self.model
        points = fcos_points([f.shape[-2:] for f in maps], m.strides)
        scale = [float(s if m.postprocess.norm_on_bbox else 1) for s in m.strides]
        return torch.cat(points), torch.cat([torch.full_like(p[:, :1], v) for p, v in zip(points, scale)])

    def _maps(self, image):
        m = self.model
        return list(m.neck({str(i): f for i, f in enumerate(m.backbone(image))}).values())

    def levels(self, image):
        maps = self._maps(image)
        outputs = self.model.roi_head(maps)
        points, stride = self._points(maps) if self.dynamic else (self.points, self.stride)
        cls = torch.cat([c.float().sigmoid().flatten(2).transpose(1, 2) for c, _, _ in outputs], 1)
        ctr = torch.cat([t.float().sigmoid().flatten(2).transpose(1, 2) for _, _, t in outputs], 1)
        d = torch.cat([d.float().flatten(2).transpose(1, 2) for _, d, _ in outputs], 1) * stride
        counts = [map_count(f) for f in maps] if self.dynamic else [lv.anchors for lv in self.spec.levels]
        return torch.cat((points - d[..., :2], points + d[..., 2:]), -1), cls * ctr, counts


def dense_kinds():
    """The model kinds with a dense export (every one-stage family's exporter)."""
    return [k for k in EXPORTERS.names() if not EXPORTERS.get(k).two_stage]


def dense_graph(model, height, width, dynamic=False):
    """The dense module of ``model`` at (height, width), its ``spec`` attached; ``dynamic``:
    at any size (anchors / points and per-level counts from the feature maps' shapes)."""
    kind = getattr(model, "kind", None)
    exporter = EXPORTERS.get(kind) if isinstance(kind, str) and kind in EXPORTERS else None
    if exporter is None or exporter.two_stage:
        raise ConfigError("--format", f"{kind} has no dense export (dense families: {', '.join(dense_kinds())})")
    return exporter(model, height, width, dynamic).eval()
