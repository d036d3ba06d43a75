"""Two-stage detectors as one graph with a free batch axis: torchvision's Faster R-CNN (FPN) and
UP's two-stage nets (:mod:`up_trainer.tasks.det.rcnn`: Faster R-CNN C4, R-FCN, Cascade R-CNN).

A two-stage net has no "raw heads" form like the dense families: its second stage runs on the
first stage's proposals, which come out of a top-k and an NMS. So the graph always holds the
first stage whole, and the forms differ only in the last step:

* raw (``--form raw``, ONNX and pt2): :class:`TwoStageGraph`, ``image`` [N, 3, H, W] and
  ``image_sizes`` [N, 2] (h, w before padding) -> ``proposals`` [N, P, 4] (the RPN's boxes after
  its per-level top-k, clipping, small-box removal and NMS, best first; rows past
  ``num_proposals`` are zero), ``num_proposals`` [N], ``boxes`` [N, P, K, 4] (each proposal's
  box for each class, decoded by the last box stage, not clipped) and ``scores`` [N, P, K]
  (the class probabilities, background excluded; -1 on the padding rows). The decode step is the
  last one the net itself takes: per image, boxes clipped, candidates not above the score
  threshold (torchvision: and narrower than 0.01 px) dropped, NMS per class, the best
  ``detections`` kept: :class:`.select.Select` with the record's ``decode`` (one level of P x K
  candidates ranked jointly).
* end2end (ONNX): the same graph followed by that step (:class:`TwoStageEndToEnd`).

With ``dynamic`` (``--dynamic-size``) the RPN's anchors come from its anchor generator inside
the graph, at the input's size, and every count that depends on it (anchors per level, the
per-level ``min(pre_nms_top_n, n)``, P) is computed there too (:mod:`.shapes`).

P is the RPN's ``post_nms_top_n`` at test time, or fewer where the levels hold fewer candidates
(every proposal row goes through the box head,
padding included: the graph's shapes do not depend on the data). RoIs are pooled as the model
pools them: RoIAlign per FPN level chosen by torchvision's level rule (computed for every RoI on
every level and picked, which gives each RoI the same values); R-FCN's position-sensitive
pooling as RoIAlign (``aligned``) read at each bin's own channel group, which is what
``ps_roi_align`` computes (ONNX has no such operator).
"""
import torch
from torch import nn
from torchvision.ops import roi_align

from ..errors import ConfigError
from ..registry import EXPORTERS
from .dense import DenseSpec, Level, decode_deltas
from .select import DROPPED, _BatchNMS, Select
from .shapes import at_most, map_count

OUTPUT_NAMES = ["proposals", "num_proposals", "boxes", "scores"]


def _clip(boxes, sizes):
    """Boxes [N, M, ..., 4] clipped to sizes [N, 2] (h, w) as torchvision clips (x to [0, w])."""
    shape = (sizes.shape[0],) + (1,) * (boxes.dim() - 2)
    h = sizes[:, 0].to(boxes.dtype).view(shape)
    w = sizes[:, 1].to(boxes.dtype).view(shape)
    x = torch.minimum(boxes[..., 0::2].clamp(min=0), w.unsqueeze(-1))
    y = torch.minimum(boxes[..., 1::2].clamp(min=0), h.unsqueeze(-1))
    return torch.stack((x[..., 0], y[..., 0], x[..., 1], y[..., 1]), -1)


class Proposals(nn.Module):
    """The RPN of ``rpn`` (torchvision's RegionProposalNetwork or a subclass) at one input size:
    feature maps -> (proposals [N, P, 4], valid [N, P] bool), as ``filter_proposals`` selects them."""

    def __init__(self, rpn, feats, height, width, dynamic=False):
        super().__init__()
        from torchvision.models.detection.image_list import ImageList

        self.rpn, self.dynamic = rpn, dynamic
        probe = torch.zeros(1, 3, height, width)
        anchors = rpn.anchor_generator(ImageList(probe, [(height, width)]), feats)[0]
        self.register_buffer("anchors", anchors.float())
        self.per_location = anchors.shape[0] // sum(f.shape[-2] * f.shape[-1] for f in feats)
        self.per_level = [f.shape[-2] * f.shape[-1] * self.per_location for f in feats]
        self.pre_nms, self.post_nms = int(rpn._pre_nms_top_n["testing"]), int(rpn._post_nms_top_n["testing"])
        self.candidates = sum(min(self.pre_nms, n) for n in self.per_level)
        self.width = min(self.post_nms, self.candidates)

    def forward(self, feats, sizes, image=None):
        """``image``: the graph's input (its padded size places the anchors of a dynamic-size graph)."""
        from torchvision.models.detection.image_list import ImageList
        from torchvision.models.detection.rpn import concat_box_prediction_layers

        rpn = self.rpn
        objectness, deltas = rpn.head(feats)
        objectness, deltas = concat_box_prediction_layers(objectness, deltas)
        n = feats[0].shape[0]
        objectness = objectness.reshape(n, -1)
        coder = rpn.box_coder
        if self.dynamic:
            anchors = rpn.anchor_generator(ImageList(image, [tuple(image.shape[-2:])]), feats)[0].float()
            per_level = [map_count(f, self.per_location) for f in feats]
            width = at_most(self.post_nms, sum(at_most(self.pre_nms, c) for c in per_level))
        else:
            anchors, per_level, width = self.anchors, self.per_level, self.width
        boxes = decode_deltas(deltas.reshape(n, -1, 4), anchors, coder.weights, coder.bbox_xform_clip)
        scores, picked, levels, start = [], [], [], 0
        for level, count in enumerate(per_level):  # the best pre_nms_top_n logits per level
            k = at_most(self.pre_nms, count) if self.dynamic else min(self.pre_nms, count)
            values, idx = objectness[:, start:start + count].topk(k, dim=1)
            scores.append(values)
            picked.append(idx + start)
            levels.append(torch.full_like(idx, level))
            start += count
        logits, idx, levels = torch.cat(scores, 1), torch.cat(picked, 1), torch.cat(levels, 1)
        b = _clip(torch.gather(boxes, 1, idx.unsqueeze(-1).expand(-1, -1, 4)), sizes)
        s = torch.sigmoid(logits)
        keep = ((b[..., 2] - b[..., 0]) >= rpn.min_size) & ((b[..., 3] - b[..., 1]) >= rpn.min_size)
        keep = keep & (s >= rpn.score_thresh)
        s = torch.where(keep, s, torch.full_like(s, DROPPED))
        offset = (levels.to(b.dtype) * (sizes.max().to(b.dtype) + 1)).unsqueeze(-1)  # NMS per level
        selected = _BatchNMS.apply(b + offset, s.unsqueeze(1), self.post_nms, float(rpn.nms_thresh))
        kept = torch.zeros_like(s).index_put((selected[:, 0], selected[:, 2]),
                                             torch.ones_like(selected[:, 0], dtype=s.dtype))
        ranked = torch.where(kept > 0, s, torch.full_like(s, -2.0))
        top, order = ranked.topk(width, dim=1)
        valid = top > -1.5
        proposals = torch.gather(b, 1, order.unsqueeze(-1).expand(-1, -1, 4)) * valid.unsqueeze(-1).to(b.dtype)
        return proposals, valid


def _rois(proposals):
    """[N, P, 4] -> [N x P, 5] rows (image index, x1, y1, x2, y2) for RoIAlign."""
    image = torch.ones_like(proposals[..., :1]).cumsum(0) - 1
    return torch.cat((image, proposals), -1).flatten(0, 1)


class MultiLevelPool(nn.Module):
    """torchvision's MultiScaleRoIAlign on [R, 5] RoIs at one input size."""

    def __init__(self, pooler, feats, height, width):
        super().__init__()
        from torchvision.ops.poolers import _setup_scales

        self.names = list(pooler.featmap_names)
        if pooler.scales is None or pooler.map_levels is None:  # set as the model sets them on its first batch
            pooler.scales, pooler.map_levels = _setup_scales([feats[k] for k in self.names], [(height, width)],
                                                             pooler.canonical_scale, pooler.canonical_level)
        self.scales, self.mapper = list(pooler.scales), pooler.map_levels
        self.output_size, self.sampling = pooler.output_size, pooler.sampling_ratio

    def forward(self, feats, rois):
        maps = [feats[k] for k in self.names]
        if len(maps) == 1:
            return roi_align(maps[0], rois, self.output_size, self.scales[0], self.sampling)
        levels = self.mapper([rois[:, 1:]]).view(-1, 1, 1, 1)
        out = None
        for level, (x, scale) in enumerate(zip(maps, self.scales)):
            pooled = roi_align(x, rois, self.output_size, scale, self.sampling)
            out = pooled if out is None else torch.where(levels == level, pooled, out)
        return out


def _ps_pool(x, rois, size, scale, sampling):
    """``ps_roi_align(x, rois, size, scale, sampling).mean((2, 3))`` from RoIAlign: bin (i, j) of
    output channel c reads channel (c, i, j) (torchvision's layout), averaged over the bins."""
    bins = size * size
    pooled = roi_align(x, rois, size, scale, sampling, aligned=True)  # ps_roi_align's half-pixel offset
    pooled = pooled.reshape(pooled.shape[0], -1, bins, bins)  # [R, C, channel bin, output bin]
    eye = torch.eye(bins, dtype=pooled.dtype, device=pooled.device)
    return (pooled * eye).sum(-1).mean(-1)


class BoxNet(nn.Module):
    """One box stage of a UP two-stage head (:mod:`up_trainer.tasks.det.rcnn.heads`) on [R, 5] RoIs."""

    def __init__(self, net, feats, height, width):
        super().__init__()
        self.net = net
        self.kind = type(net).__name__
        if self.kind == "FCHead":
            self.pool = MultiLevelPool(net.pool, feats, height, width)
        elif self.kind not in ("Res5Head", "RFCNHead"):
            raise ConfigError("--format", f"the box head {self.kind} has no export (Res5Head, FCHead, RFCNHead)")

    def forward(self, feats, rois):
        net = self.net
        if self.kind == "Res5Head":
            x = roi_align(feats["0"], rois, net.pool_size, net.scale, net.sampling)
            x = net.layer4(x).mean((2, 3))
            return net.fc_cls(x), net.fc_loc(x)
        if self.kind == "FCHead":
            x = self.pool(feats, rois).flatten(1)
            x = torch.relu(net.fc7(torch.relu(net.fc6(x))))
            return net.fc_rcnn_cls(x), net.fc_rcnn_loc(x)
        x = net.new_conv(feats["0"])
        if net.relu_after_feature_conv:
            x = torch.relu(x)
        pool = (net.pool_size, net.scale, net.sampling)
        return _ps_pool(net.rfcn_score(x).float(), rois, *pool), _ps_pool(net.rfcn_bbox(x).float(), rois, *pool)


class TorchvisionBoxNet(nn.Module):
    """torchvision's RoIHeads box branch on [R, 5] RoIs."""

    def __init__(self, heads, feats, height, width):
        super().__init__()
        self.heads = heads
        self.pool = MultiLevelPool(heads.box_roi_pool, feats, height, width)

    def forward(self, feats, rois):
        x = self.heads.box_head(self.pool(feats, rois))
        return self.heads.box_predictor(x)


def _per_class(deltas, classes):
    """[R, 4] or [R, 4 K] -> [R, K', 4]."""
    return deltas.reshape(deltas.shape[0], -1, 4).expand(-1, classes, -1) if deltas.shape[1] == 4 else \
        deltas.reshape(deltas.shape[0], classes, 4)


@EXPORTERS.register("up_rcnn")
class TwoStageGraph(nn.Module):
    """image, image_sizes -> proposals, num_proposals, boxes, scores (see the module docstring).
    The exporter of UP's two-stage nets (``up_rcnn``); :class:`TorchvisionTwoStageGraph`
    torchvision's Faster R-CNN."""

    two_stage = True
    preprocess = "pad"
    torchvision = False  # the net's parts: torchvision's detector, or UP's rpn / box stages

    @staticmethod
    def threshold_part(model):
        """The part of ``model`` whose ``score_thresh`` its post-processing applies."""
        return model._part("box")

    def __init__(self, model, height, width, dynamic=False):
        super().__init__()
        self.model, self.dynamic = model, dynamic
        if self.torchvision:
            t = model.detector.transform
            self.register_buffer("mean", torch.tensor(t.image_mean, dtype=torch.float32).view(1, -1, 1, 1))
            self.register_buffer("std", torch.tensor(t.image_std, dtype=torch.float32).view(1, -1, 1, 1))
            rpn, heads = model.rpn, model.head
        else:
            rpn, heads = model._part("rpn"), model._part("box")
        with torch.no_grad():
            feats = self.features(torch.zeros(1, 3, height, width))
        self.proposals = Proposals(rpn, list(feats.values()), height, width, dynamic)
        if self.torchvision:
            self.nets = nn.ModuleList([TorchvisionBoxNet(heads, feats, height, width)])
            self.coders = [heads.box_coder]
            self.ensemble, min_size = False, 1e-2  # RoIHeads drops boxes narrower than 0.01 px
        else:
            self.nets = nn.ModuleList([BoxNet(net, feats, height, width) for net in heads.nets])
            self.coders = list(heads.coders)
            self.ensemble, min_size = bool(heads.ensemble), 0.0
        classes = int(model.num_classes)
        width_p = self.proposals.width
        # dynamic: one group of P x K candidates, P known only in the graph; k bounds it from above
        k = (self.proposals.post_nms if dynamic else width_p) * classes
        self.spec = DenseSpec([Level(width_p, k, float(heads.score_thresh))],
                              float(heads.nms_thresh), int(heads.detections_per_img), 1, min_size)

    def features(self, image):
        m = self.model
        if self.torchvision:
            return m.detector.backbone(self.normalise(image))
        feats = m._part("backbone")(image)
        if m.names.get("neck"):
            return m._part("neck")({str(i): f for i, f in enumerate(feats)})
        return {"0": feats[-1]}

    def normalise(self, image):
        return (image - self.mean) / self.std if self.torchvision else image

    def forward(self, image, image_sizes):
        feats = self.features(image)
        proposals, valid = self.proposals(list(feats.values()), image_sizes, image)
        n, p = proposals.shape[:2]
        rois, probs = proposals, []
        last = len(self.nets) - 1
        for t, net in enumerate(self.nets):
            logits, deltas = (o.float() for o in net(feats, _rois(rois)))
            prob = torch.softmax(logits, -1)
            probs.append(prob)
            if t < last:  # cascade: each RoI moved by the deltas of its best class
                best = prob[:, 1:].argmax(1) + 1
                d = torch.gather(_per_class(deltas, prob.shape[1]), 1, best.view(-1, 1, 1).expand(-1, 1, 4))[:, 0]
                c = self.coders[t]
                moved = decode_deltas(d, rois.reshape(-1, 4), c.weights, c.bbox_xform_clip)
                rois = _clip(moved.view(n, p, 4), image_sizes)
        scores = sum(probs) / len(probs) if self.ensemble else probs[-1]
        classes = scores.shape[1]
        c = self.coders[-1]
        boxes = decode_deltas(_per_class(deltas, classes), rois.reshape(-1, 1, 4), c.weights, c.bbox_xform_clip)
        boxes = boxes.view(n, p, classes, 4)[:, :, 1:]
        scores = scores.view(n, p, classes)[:, :, 1:]
        scores = torch.where(valid.unsqueeze(-1), scores, torch.full_like(scores, DROPPED))
        return proposals, valid.sum(1), boxes, scores


@EXPORTERS.register("faster_rcnn")
class TorchvisionTwoStageGraph(TwoStageGraph):
    """torchvision's Faster R-CNN (FPN): its transform normalises inside the graph."""

    preprocess = "torchvision"
    torchvision = True

    @staticmethod
    def threshold_part(model):
        return getattr(getattr(model, "detector", None), "roi_heads", None)


def two_stage_kinds():
    """The model kinds exported as two-stage graphs."""
    return [k for k in EXPORTERS.names() if EXPORTERS.get(k).two_stage]


class TwoStageEndToEnd(nn.Module):
    """image, image_sizes -> num_detections, boxes, scores, labels (:mod:`.select`)."""

    output_names = ["num_detections", "boxes", "scores", "labels"]

    def __init__(self, graph):
        super().__init__()
        self.graph = graph
        self.select = Select(graph.spec)

    def forward(self, image, image_sizes):
        _, _, boxes, scores = self.graph(image, image_sizes)
        counts = [boxes.shape[1]] if self.graph.dynamic else None
        return self.select(boxes, scores, image_sizes, counts)
