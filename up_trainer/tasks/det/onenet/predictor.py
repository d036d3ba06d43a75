"""OneNet's prediction (UP's ``onenet`` predictor): no NMS. Per image the ``topk_boxes`` best
(anchor, class) sigmoid scores over all levels (UP takes the best per class, then the best of
those: the same set), their decoded boxes clipped to the image, boxes narrower or lower than
``min_size`` dropped."""
import torch


class OneNetPredictor:
    def __init__(self, box_coder, topk_boxes=100, min_size=0.0):
        self.box_coder, self.topk_boxes, self.min_size = box_coder, topk_boxes, min_size

    @torch.no_grad()
    def __call__(self, outputs, anchors_per_level, image_sizes):
        anchors = torch.cat(anchors_per_level)
        scores_all = outputs["cls"].sigmoid()
        results = []
        for i, (h, w) in enumerate(image_sizes):
            scores = scores_all[i]
            c = scores.shape[1]
            values, flat = scores.flatten().topk(min(self.topk_boxes, scores.numel()))
            idx, label = flat // c, flat % c
            boxes = self.box_coder.decode_single(outputs["deltas"][i, idx], anchors[idx])
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, w)
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, h)
            keep = ((boxes[:, 2] - boxes[:, 0]) >= self.min_size) & ((boxes[:, 3] - boxes[:, 1]) >= self.min_size)
            results.append({"boxes": boxes[keep], "scores": values[keep], "labels": label[keep] + 1})
        return results
