"""The decode step of an ONNX-exported RetinaNet / FCOS: raw head outputs -> boxes.

The exported graph stops before post-processing (its output count depends on the data, and
a batch axis must stay free). What follows it is torchvision's own post-processing, run here
on the graph's outputs with the parameters written beside the model (``<out>.json``,
``decode``), so an exported model and ``up predict`` agree box for box. Per image:

1. per pyramid level (``num_anchors_per_level`` splits A): class scores = sigmoid(cls_logits)
   (FCOS: sqrt(sigmoid(cls_logits) * sigmoid(bbox_ctrness))); keep scores > ``score_thresh``;
   the best ``topk_candidates``; anchor = index // K, label = index % K;
2. boxes from (anchor, regression) by the detector's box coder (``box_coder``): RetinaNet
   ``deltas`` (centre and log-size deltas over ``weights``, torchvision's BoxCoder), FCOS
   ``linear`` (distances to the four sides, in anchor-size units when normalize_by_size);
   clipped to the export size;
3. class-wise NMS at ``nms_thresh``, the best ``detections_per_img`` kept;
4. boxes scaled from the export size to the original image (x by W0/W, y by H0/H).

Labels are 1..C as in training (0 is torchvision's background and never scores high after
training, but an untrained model may emit it).
"""
import types

import torch


def decode_params(model, graph):
    det = model.detector
    return {"kind": model.kind, "num_anchors_per_level": list(graph.num_anchors_per_level),
            "score_thresh": float(det.score_thresh), "nms_thresh": float(det.nms_thresh),
            "topk_candidates": int(det.topk_candidates), "detections_per_img": int(det.detections_per_img),
            "box_coder": _coder_params(det.box_coder)}


def _coder_params(coder):
    if hasattr(coder, "normalize_by_size"):
        return {"type": "linear", "normalize_by_size": bool(coder.normalize_by_size)}
    return {"type": "deltas", "weights": [float(w) for w in coder.weights], "bbox_xform_clip": float(coder.bbox_xform_clip)}


def _torchvision_postprocess(params):
    from torchvision.models.detection import FCOS, RetinaNet
    from torchvision.models.detection._utils import BoxCoder, BoxLinearCoder

    c = params["box_coder"]
    coder = (BoxLinearCoder(normalize_by_size=c["normalize_by_size"]) if c["type"] == "linear"
             else BoxCoder(weights=tuple(c["weights"]), bbox_xform_clip=c["bbox_xform_clip"]))
    post = {"fcos": FCOS.postprocess_detections, "retinanet": RetinaNet.postprocess_detections}.get(params["kind"])
    if post is None:
        raise ValueError(f"no decode step for {params['kind']!r} (only retinanet and fcos export raw heads)")
    return post, coder


def decode_detections(outputs, params, image_size, original_sizes=None, split=None):
    """``outputs``: the graph's outputs in order (numpy arrays or tensors); ``params``: the
    ``decode`` entry of the export's JSON; ``image_size`` (H, W) the export size;
    ``original_sizes``: one (H0, W0) per image to scale boxes back to (default: the export
    size); ``split``: the anchors of each level when the export has a free input size (its
    ``anchors_per_level`` output; default the record's ``num_anchors_per_level``). Returns one {boxes [n, 4] xyxy, scores [n], labels [n]} per image."""
    from .graphs import head_output_names

    kind = params["kind"]
    names = head_output_names(kind)
    tensors = [torch.as_tensor(o) for o in outputs]
    head = dict(zip(names, tensors[: len(names)]))
    anchors_all = tensors[len(names)]
    postprocess, coder = _torchvision_postprocess(params)
    self_like = types.SimpleNamespace(box_coder=coder, score_thresh=params["score_thresh"],
                                      nms_thresh=params["nms_thresh"], topk_candidates=params["topk_candidates"],
                                      detections_per_img=params["detections_per_img"])
    split = list(params["num_anchors_per_level"] if split is None else split)
    n = head[names[0]].shape[0]
    per_level = {k: list(v.split(split, dim=1)) for k, v in head.items()}
    anchors = [list(anchors_all.split(split, dim=0)) for _ in range(n)]
    sizes = [tuple(int(v) for v in image_size)] * n
    dets = postprocess(self_like, per_level, anchors, sizes)
    out = []
    for i, d in enumerate(dets):
        boxes = d["boxes"].clone()
        if original_sizes is not None:
            (h, w), (h0, w0) = sizes[i], original_sizes[i]
            boxes[:, 0::2] *= w0 / w
            boxes[:, 1::2] *= h0 / h
        out.append({"boxes": boxes, "scores": d["scores"], "labels": d["labels"]})
    return out
