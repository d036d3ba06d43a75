"""The mimic job types (UP's ``mimic_ins_type``): the losses each computes, the options it
reads and the extra student / teacher outputs it needs. No torch import here: ``up config``
checks a job against this table before anything is built.

* ``base``: each named student output against the teacher's (logits or feature maps).
* ``SampleFeature``: the FPN maps of both nets pooled (RoI-align, 7x7) on the same RoIs, the
  teacher's proposals (``teacher_proposal: true``) or the student's, and compared there.
* ``FRS``: feature-richness mimic: FPN maps and RPN objectness compared where the teacher's
  objectness (max over anchors, after a sigmoid) is high, that score being the weight.
* ``DeFeat``: decoupled mimic: backbone maps compared plainly; FPN maps compared inside and
  outside the ground-truth boxes (each box on the level its size selects) with separate weights.
"""

# slot -> (default {type, kwargs}, the loss types the slot takes)
_L2 = ("l2_loss",)
_FEATURE_DEFAULT = {"type": "l2_loss", "kwargs": {"feat_norm": False, "batch_mean": False}}
LOSS_SLOTS = {
    "base": {"loss": ({"type": "l2_loss", "kwargs": {"feat_norm": True, "batch_mean": True}},
                      ("kd_loss", "kl_loss", "ce_loss", "l2_loss"))},
    "SampleFeature": {"feature_loss": (_FEATURE_DEFAULT, _L2)},
    "FRS": {"neck_loss": (_FEATURE_DEFAULT, _L2),
            "pred_loss": ({"type": "bce_loss", "kwargs": {"T": 1.0, "batch_mean": False}}, ("bce_loss",))},
    "DeFeat": {"backbone_loss": (_FEATURE_DEFAULT, _L2), "neck_fg_loss": (_FEATURE_DEFAULT, _L2),
               "neck_bg_loss": (_FEATURE_DEFAULT, _L2)},
}
MIMIC_TYPES = tuple(LOSS_SLOTS)

# type -> {option: default}; a list default means a list of numbers of the job's levels
OPTIONS = {
    "base": {},
    "SampleFeature": {"rcnn_fpn_levels": [0, 1, 2, 3], "rcnn_fpn_strides": [4, 8, 16, 32],
                      "rcnn_fpn_base_scale": 56, "teacher_proposal": True, "pool_size": 7},
    "FRS": {},
    "DeFeat": {"rpn_fpn_levels": [0, 1, 2, 3, 4], "rpn_fpn_strides": [4, 8, 16, 32, 64],
               "rpn_fpn_base_scale": 56, "neck_feature_nums": 5},
}
# UP option keys that name UP module paths we do not have; what is used instead
REFUSED_OPTIONS = {
    "student_roipooler": "the RoIs are pooled with torchvision's roi_align (pool_size, default 7); no pooler "
                         "module is named",
    "teacher_roipooler": "the RoIs are pooled with torchvision's roi_align (pool_size, default 7); no pooler "
                         "module is named",
}

# Extra outputs a type reads from both nets: {what: (module path in our nets, what it gives)}
PROPOSALS = ("roi_head", "the region proposals (a two-stage detector's RPN)")
SCORES = ("roi_head.head", "the RPN head's objectness logits (a two-stage detector)")
NEEDS = {"base": {}, "SampleFeature": {"proposals": PROPOSALS}, "FRS": {"scores": SCORES}, "DeFeat": {}}


def loss_default(kind, slot):
    return LOSS_SLOTS[kind][slot][0]
