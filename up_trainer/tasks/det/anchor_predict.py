"""From the head's maps to boxes: anchors, flattening, decoding, and UP's two predictors.

Anchors follow UP's ``hand_craft`` rule (:func:`up_trainer.tasks.det.pyramid_levels.cell_anchors`):
cell anchors centred on ((stride - 1) / 2, (stride - 1) / 2), shifted by (x * stride,
y * stride); anchors are ordered row, column, then anchor within the cell, levels one after
another. Offsets decode with torchvision's box coder (weights 1, sizes clipped at
exp(log(1000 / 16)), no +1 pixel convention).

Scores: sigmoid(cls), times sigmoid(iou) with the IoU branch (UP's ``retina_post_iou``).

- ``base``: per level and class, scores above ``score_thresh`` (applied, as in UP, only on
  levels of more than 120 anchors), the ``min(pre_nms_top_n, post_nms_top_n)`` best;
- ``base_multicls``: per level, the ``pre_nms_top_n`` best (anchor, class) pairs jointly,
  then the threshold;
then over all levels NMS per class (torchvision's ``batched_nms``, which is UP's class-offset
NMS) and the ``detections_per_img`` best. Boxes are clipped to the image before NMS.
"""
import torch
from torchvision.ops import batched_nms

from ...errors import ConfigError
from .anchor_model import flatten_outputs, grid_anchors  # noqa: F401 - the predictor's inputs, named here too

PREDICTORS = ("base", "base_multicls")
SMALL_LEVEL = 120  # UP skips the score threshold on levels with at most this many anchors


class RetinaPlusPredictor:
    """Flattened outputs + anchors -> per image {boxes xyxy, scores, labels 1..C}."""

    def __init__(self, box_coder, kind="base", score_thresh=0.05, pre_nms_top_n=1000, post_nms_top_n=1000,
                 nms_thresh=0.5, detections_per_img=100):
        if kind not in PREDICTORS:
            raise ConfigError("predictor", f"{kind!r} is not one of {', '.join(PREDICTORS)}")
        for name, value in (("score_thresh", score_thresh), ("nms_thresh", nms_thresh)):
            if not 0 <= value <= 1:
                raise ConfigError(name, f"must be in [0, 1], got {value}")
        for name, value in (("pre_nms_top_n", pre_nms_top_n), ("post_nms_top_n", post_nms_top_n),
                            ("detections_per_img", detections_per_img)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be an integer >= 1, got {value!r}")
        self.box_coder, self.kind = box_coder, kind
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.pre_nms_top_n, self.post_nms_top_n = pre_nms_top_n, post_nms_top_n
        self.detections_per_img = detections_per_img

    @staticmethod
    def scores(outputs):
        """sigmoid(cls), times sigmoid(iou) where the head has the IoU branch."""
        scores = outputs["cls"].sigmoid()
        if outputs.get("iou") is not None:
            scores = scores * outputs["iou"].sigmoid()[..., None]
        return scores

    def _level(self, scores, thresh):
        """(anchor index, class index, score) kept on one level of one image."""
        k, c = scores.shape
        if self.kind == "base":
            top = min(self.pre_nms_top_n, self.post_nms_top_n, k)
            values, anchor = scores.topk(top, dim=0)  # [top, C], best first per class
            label = torch.arange(c, device=scores.device).expand(top, c)
            keep = values > thresh
            return anchor[keep], label[keep], values[keep]
        values, flat = scores.flatten().topk(min(self.pre_nms_top_n, k * c))
        keep = values > thresh
        return flat[keep] // c, flat[keep] % c, values[keep]

    @torch.no_grad()
    def __call__(self, outputs, anchors_per_level, image_sizes):
        scores_all = self.scores(outputs)
        results = []
        for i, (h, w) in enumerate(image_sizes):
            boxes, scores, labels, start = [], [], [], 0
            for anchors in anchors_per_level:
                n = anchors.shape[0]
                thresh = self.score_thresh if n > SMALL_LEVEL else 0.0
                idx, label, score = self._level(scores_all[i, start:start + n], thresh)
                b = self.box_coder.decode_single(outputs["deltas"][i, start + idx], anchors[idx])
                b[:, 0::2] = b[:, 0::2].clamp(0, w)
                b[:, 1::2] = b[:, 1::2].clamp(0, h)
                boxes.append(b), scores.append(score), labels.append(label)
                start += n
            b, s, lab = torch.cat(boxes), torch.cat(scores), torch.cat(labels)
            kept = batched_nms(b, s, lab, self.nms_thresh)[: self.detections_per_img]
            results.append({"boxes": b[kept], "scores": s[kept], "labels": lab[kept] + 1})
        return results
