"""What each mimic job type computes from the captured outputs (the types: :mod:`.kinds`).

Each function takes the job, its built losses ({slot: loss module}), the student's and one
teacher's outputs at the named modules (in order), and a :class:`Seen` of what else the step
saw, and returns ``{slot: loss}`` before the job's weight. The level rule for boxes is UP's:
a box of side sqrt(w * h) goes to level floor(log2(sqrt(w * h) / base_scale)), clamped to the
job's levels.
"""
from dataclasses import dataclass, field

import torch
from torchvision.ops import roi_align

from ..errors import ConfigError, join_path


@dataclass
class Seen:
    """The step's batch targets and the extra outputs the job types read."""
    boxes: list = None  # ground-truth boxes per image (xyxy, input pixels)
    student: dict = field(default_factory=dict)  # "proposals" / "scores" -> output
    teacher: dict = field(default_factory=dict)
    adapt: dict = field(default_factory=dict)  # out_name -> the adapt part's maps


def box_levels(boxes, levels, base_scale):
    """UP's level of each box (N x 4, xyxy)."""
    scale = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).clamp(min=0).sqrt()
    level = torch.floor(torch.log2(scale / base_scale + 1e-6))
    return level.clamp(min(levels), max(levels)).long()


def gt_masks(boxes, levels, strides, base_scale, shapes):
    """1 inside each ground-truth box on the level its size selects, else 0: one B x H x W
    mask per map shape (B x C x H x W). A box thinner than a cell marks the cell it starts in."""
    masks = []
    for index, (b, _, h, w) in enumerate(shapes):
        mask = torch.zeros(b, h, w)
        for image, image_boxes in enumerate(boxes):
            if image_boxes.numel() == 0:
                continue
            image_boxes = image_boxes.detach().float().cpu()
            for box, level in zip(image_boxes, box_levels(image_boxes, levels, base_scale)):
                if int(level) != index:
                    continue
                x1, y1, x2, y2 = (box / strides[index]).tolist()
                lx, rx, ly, ry = max(int(x1), 0), min(int(x2), w), max(int(y1), 0), min(int(y2), h)
                if lx >= rx or ly >= ry:
                    mask[image, min(ly, h - 1), min(lx, w - 1)] = 1
                else:
                    mask[image, ly:ry, lx:rx] = 1
        masks.append(mask)
    return masks


def roi_features(rois, maps, levels, strides, base_scale, pool_size):
    """Each RoI (a list of N_i x 4 boxes per image) pooled from the map of its level, in RoI
    order: R x C x pool x pool."""
    batch_rois = torch.cat([torch.cat([torch.full_like(r[:, :1], i), r], dim=1)
                            for i, r in enumerate(rois)]).to(maps[0].dtype).detach()
    level = box_levels(batch_rois[:, 1:], levels, base_scale)
    out = maps[0].new_zeros(batch_rois.shape[0], maps[0].shape[1], pool_size, pool_size)
    for lvl in levels:
        index = torch.nonzero(level == lvl).flatten()
        if index.numel():
            out[index] = roi_align(maps[lvl], batch_rois[index], pool_size, spatial_scale=1.0 / strides[lvl],
                                   sampling_ratio=0)
    return out


def base(job, losses, feats_s, feats_t, seen):
    return {"loss": losses["loss"](feats_s, feats_t) / len(feats_s)}  # UP: the mean over the pairs


def sample_feature(job, losses, feats_s, feats_t, seen):
    opts = job.options
    rois = (seen.teacher if opts["teacher_proposal"] else seen.student)["proposals"]
    if max(opts["rcnn_fpn_levels"]) >= len(feats_s):
        raise ConfigError(join_path(join_path(job.path, "options"), "rcnn_fpn_levels"), f"level "
                          f"{max(opts['rcnn_fpn_levels'])} but the job names {len(feats_s)} maps")
    args = (opts["rcnn_fpn_levels"], opts["rcnn_fpn_strides"], opts["rcnn_fpn_base_scale"], opts["pool_size"])
    if sum(r.shape[0] for r in rois) == 0:
        return {"feature_loss": feats_s[0].sum() * 0.0}  # no proposal: nothing to compare, no gradient
    with torch.no_grad():
        pooled_t = roi_features(rois, feats_t, *args)
    pooled_s = roi_features(rois, feats_s, *args)
    return {"feature_loss": losses["feature_loss"]([pooled_s], [pooled_t]) / 2.0}


def _check_scores(job, feats, scores, whose):
    if not isinstance(scores, (list, tuple)) or len(scores) < len(feats) or any(
            s.shape[-2:] != f.shape[-2:] for s, f in zip(scores, feats)):
        got = [tuple(s.shape) for s in scores] if isinstance(scores, (list, tuple)) else type(scores).__name__
        raise ConfigError(join_path(job.path, "teachers" if whose != "student" else "student"),
                          f"FRS weighs each named map by the {whose}'s RPN objectness at the same level, but the "
                          f"maps are {[tuple(f.shape) for f in feats]} and the scores {got}",
                          "name the FPN levels in order (neck.p2_conv ...)")


def frs(job, losses, feats_s, feats_t, seen):
    scores_s, scores_t = seen.student["scores"], seen.teacher["scores"]
    _check_scores(job, feats_s, scores_s, "student")
    _check_scores(job, feats_t, scores_t, "teacher")
    n = len(feats_t)
    masks = [torch.sigmoid(t.detach().float()).max(dim=1, keepdim=True).values for t in scores_t[:n]]
    return {"neck_loss": losses["neck_loss"](feats_s, feats_t, masks=masks),
            "pred_loss": losses["pred_loss"](list(scores_s[:n]), list(scores_t[:n]), masks=masks)}


def defeat(job, losses, feats_s, feats_t, seen):
    opts = job.options
    n = opts["neck_feature_nums"]
    bb = len(feats_s) - n
    out = {"backbone_loss": losses["backbone_loss"](feats_s[:bb], feats_t[:bb]) / bb / 2.0}
    neck_s = seen.adapt.get("adapt_neck_features") or feats_s[bb:]  # UP: the neck adapt part's maps
    neck_t = feats_t[bb:]
    if len(neck_s) != n or max(opts["rpn_fpn_levels"]) >= n:
        raise ConfigError(join_path(join_path(job.path, "options"), "neck_feature_nums"), f"{n} neck maps, levels "
                          f"{opts['rpn_fpn_levels']}, and the student gives {len(neck_s)}")
    shapes = [tuple(m.shape) for m in neck_s]
    masks = gt_masks(seen.boxes, opts["rpn_fpn_levels"], opts["rpn_fpn_strides"], opts["rpn_fpn_base_scale"], shapes)
    fg = [m.to(neck_s[i].device)[:, None].expand(shapes[i]) for i, m in enumerate(masks)]
    out["neck_fg_loss"] = losses["neck_fg_loss"](neck_s, neck_t, masks=fg) / n / 2.0
    out["neck_bg_loss"] = losses["neck_bg_loss"](neck_s, neck_t, masks=[1 - m for m in fg]) / n / 2.0
    return out


COMPUTE = {"base": base, "SampleFeature": sample_feature, "FRS": frs, "DeFeat": defeat}
