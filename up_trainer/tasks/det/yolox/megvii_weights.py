"""Megvii's YOLOX weights (``yolox_s.pth`` ... of their release, or a file their trainer
wrote) in our YoloxModel's names.

Their model is ``YOLOX(backbone=YOLOPAFPN, head=YOLOXHead)`` and the PAFPN holds the
CSPDarknet as its own ``backbone``; ours has the three parts side by side. Below those three
prefixes every module name is the same (``stem.conv.conv``, ``dark2.0``, ``C3_p4.m.0.conv1``,
``stems.0``, ``cls_convs.0.0.dconv`` ...):

==========================  ====================
theirs                      ours
==========================  ====================
``backbone.backbone.*``     ``backbone.*``
``backbone.*`` (the rest)   ``neck.*``
``head.*``                  ``roi_head.*``
==========================  ====================

Their trainer reads images with OpenCV and feeds them as 0-255 BGR; ours are 0-255 RGB
(``pixel_scale``), so the stem's input channels are reversed within each of the Focus's four
2x2-pixel blocks (its space-to-depth order is the same as ours).
"""
import logging

log = logging.getLogger("up")
STEM = "backbone.stem.conv.conv.weight"
_PREFIXES = (("backbone.backbone.", "backbone."), ("backbone.", "neck."), ("head.", "roi_head."))


def is_megvii_layout(state):
    return any(k.startswith("backbone.backbone.") for k in state)


def from_megvii(state):
    """``state`` in Megvii's names -> ours, with the stem's colour order made RGB."""
    out = {}
    for key, value in state.items():
        for theirs, ours in _PREFIXES:
            if key.startswith(theirs):
                key = ours + key[len(theirs):]
                break
        out[key] = value
    stem = out.get(STEM)
    if stem is not None and stem.dim() == 4 and stem.shape[1] == 12:  # the Focus stem: 4 blocks x BGR
        out[STEM] = stem.reshape(stem.shape[0], 4, 3, *stem.shape[2:]).flip(2).reshape(stem.shape)
        log.info("YOLOX weights in Megvii's layout: names mapped, stem channels BGR -> RGB")
    return out
