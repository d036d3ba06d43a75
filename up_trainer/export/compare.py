"""The detections of an exported file against the PyTorch model's, image by image, with the
one margin a correct export leaves: its scores agree with PyTorch's to within the tolerance,
so a candidate whose score is that close to a cut may fall on either side of it.

Per image, each PyTorch detection (best first) is paired with the unpaired exported detection
of the same label nearest to it whose error is within the tolerance. The error is that of
:mod:`.verify` (|got - want| / (1 + |want|)) over the score and the box, a box coordinate's
divided by at least 1 + the image's larger side: a box is a place in the image, and a clipped
one is what is left of a larger computed box (a barely trained net's boxes are often hundreds
of pixels beyond the image), whose float32 rounding is relative to its own size. What stays unpaired on either side is
*left out* when one of these explains it, a score ``s`` being "at" a cut ``c`` when
``|s - c| <= tolerance x (1 + |c|)``:

* the score threshold: ``s`` is at the model's score threshold;
* the top-k cut: the other side kept its full ``detections`` per image and ``s`` is at the
  lowest score it kept (equal scores at the cut are kept in any order);
* a cut before NMS: ``s`` is at one of the image's pre-NMS top-k boundary scores, where the
  caller knows them;
* NMS: the other side holds an unpaired detection of the same label that overlaps it by more
  than the NMS IoU threshold with a score at least ``s`` (minus the margin): that one could
  have suppressed it (two such detections of equal score: NMS kept a different one of a tie).

Anything else unpaired is a real difference, and :func:`compare_detections` says which image,
both counts, the first unexplained detection and the cuts it was measured against.
"""
import math
from dataclasses import dataclass, field
from typing import List

import torch


@dataclass
class Cuts:
    """Where a detector cuts its candidates: score threshold, detections kept per image, NMS IoU."""
    thresh: float
    detections: int
    nms_thresh: float
    pre_nms: List[List[float]] = field(default_factory=list)  # per image: pre-NMS top-k boundary scores

    @classmethod
    def from_spec(cls, spec):
        """From a :class:`.dense.DenseSpec` (the thresholds of its levels are one value in every family)."""
        return cls(min((lv.thresh for lv in spec.levels), default=0.0), int(spec.detections), float(spec.nms_thresh))


@dataclass
class Outcome:
    """What one comparison found: paired detections and their largest error, those left out by
    the rule, and the first difference no rule explains (None when there is none)."""
    compared: int = 0
    left_out: int = 0
    max_error: float = 0.0
    problem: str = None
    reasons: dict = field(default_factory=dict)  # rule -> detections it left out

    def add(self, other):
        self.compared += other.compared
        self.left_out += other.left_out
        self.max_error = max(self.max_error, other.max_error)
        self.problem = self.problem or other.problem
        for k, v in other.reasons.items():
            self.reasons[k] = self.reasons.get(k, 0) + v


def _errors(got, want, side):
    """[G, W] error matrix over box and score, inf where the labels differ; a box coordinate's
    error relative to the image's larger ``side`` at least (see the module docstring)."""
    gb, wb = got["boxes"].double().reshape(-1, 1, 4), want["boxes"].double().reshape(1, -1, 4)
    box = ((gb - wb).abs() / (1 + wb.abs().clamp(min=side))).amax(-1)
    gs, ws = got["scores"].double().reshape(-1, 1), want["scores"].double().reshape(1, -1)
    error = torch.maximum(box, (gs - ws).abs() / (1 + ws.abs()))
    error = torch.where(torch.isfinite(error), error, torch.full_like(error, math.inf))
    same = got["labels"].reshape(-1, 1) == want["labels"].reshape(1, -1)
    return torch.where(same, error, torch.full_like(error, math.inf))


def _at(score, cut, tolerance):
    return abs(score - cut) <= tolerance * (1 + abs(cut))


def _iou(a, b):
    from torchvision.ops import box_iou

    return float(box_iou(a.double().view(1, 4), b.double().view(1, 4))[0, 0])


def compare_image(got, want, cuts, tolerance, side, pre_nms=()):
    """One image's detections ({boxes, scores, labels}) -> :class:`Outcome`; ``side``: the
    image's larger side in pixels."""
    got = {k: v.detach().cpu() for k, v in got.items()}
    want = {k: v.detach().cpu() for k, v in want.items()}
    errors = _errors(got, want, side)
    free = torch.ones(errors.shape[0], dtype=torch.bool)
    paired_want = torch.zeros(errors.shape[1], dtype=torch.bool)
    worst = 0.0
    for j in torch.argsort(want["scores"], descending=True, stable=True).tolist():
        column = torch.where(free, errors[:, j], torch.full_like(errors[:, j], math.inf))
        if column.numel() and float(column.min()) <= tolerance:
            i = int(column.argmin())
            free[i], paired_want[j] = False, True
            worst = max(worst, float(column[i]))
    sides = {"exported": (got, free.nonzero()[:, 0].tolist()), "PyTorch": (want, (~paired_want).nonzero()[:, 0].tolist())}
    outcome = Outcome(compared=int(paired_want.sum()), max_error=worst)
    for side, other in (("exported", "PyTorch"), ("PyTorch", "exported")):
        dets, rows = sides[side]
        other_dets, other_rows = sides[other]
        for r in rows:
            reason = _explain(dets, r, other_dets, other_rows, cuts, tolerance, pre_nms)
            if reason is None:
                if outcome.problem is None:
                    outcome.problem = _describe(side, dets, r, other_dets, errors, got, want, cuts)
                continue
            outcome.left_out += 1
            outcome.reasons[reason] = outcome.reasons.get(reason, 0) + 1
    return outcome


def _explain(dets, r, other, other_rows, cuts, tolerance, pre_nms):
    """The rule that leaves detection ``r`` of ``dets`` out, or None (see the module docstring)."""
    s = float(dets["scores"][r])
    if _at(s, cuts.thresh, tolerance):
        return "score threshold"
    n_other = len(other["scores"])
    if n_other >= cuts.detections and n_other and _at(s, float(other["scores"].min()), tolerance):
        return "top-k cut"
    if any(_at(s, c, tolerance) for c in pre_nms):
        return "pre-NMS top-k cut"
    for q in other_rows:
        if (int(other["labels"][q]) == int(dets["labels"][r])
                and float(other["scores"][q]) >= s - tolerance * (1 + abs(s))
                and _iou(other["boxes"][q], dets["boxes"][r]) > cuts.nms_thresh):
            return "NMS tie"
    return None


def _describe(side, dets, r, other_dets, errors, got, want, cuts):
    s, label = float(dets["scores"][r]), int(dets["labels"][r])
    box = ", ".join(f"{v:.1f}" for v in dets["boxes"][r].tolist())
    # the nearest detection of the same label on the other side, if any: how far it is
    column = errors[r] if side == "exported" else errors[:, r]
    near = ""
    if column.numel() and math.isfinite(float(column.min())):
        near = f"; the nearest {'PyTorch' if side == 'exported' else 'exported'} one of that label differs by " \
               f"{float(column.min()):.3g}"
    lowest = [f"{float(d['scores'].min()):.4g}" if len(d["scores"]) else "none" for d in (want, got)]
    return (f"PyTorch {len(want['scores'])} detections, exported {len(got['scores'])}; the {side} detection "
            f"label {label} score {s:.4g} box [{box}] has no partner{near} (score threshold {cuts.thresh:g}, "
            f"{cuts.detections} kept at most, lowest kept score PyTorch {lowest[0]} / exported {lowest[1]})")


def compare_detections(got, want, cuts, tolerance, names, sides, pre_nms=None):
    """Lists of per-image detections -> :class:`Outcome`; ``names``: what each image is, for
    the message; ``sides``: each image's larger side; ``pre_nms``: per image, its pre-NMS cut
    scores (or None)."""
    outcome = Outcome()
    if len(got) != len(want):
        outcome.problem = f"PyTorch gave detections for {len(want)} images, the exported file for {len(got)}"
        return outcome
    for i, (g, w) in enumerate(zip(got, want)):
        one = compare_image(g, w, cuts, tolerance, sides[i], pre_nms[i] if pre_nms else ())
        if one.problem:
            one.problem = f"on {names[i]}: {one.problem}"
        outcome.add(one)
    return outcome


def describe(check):
    """``check`` (a record's ``verification``) in a few words, for the log line."""
    out = f"; {check['compared_detections']} detections compared on {check['images']}"
    if check.get("left_out"):
        why = ", ".join(f"{rule}: {n}" for rule, n in sorted(check["left_out_by"].items()))
        out += f", {check['left_out']} left out ({why})"
    if "model_score_thresh" in check:
        out += f", at score threshold {check['score_thresh']:g} (the model's {check['model_score_thresh']:g} " \
               "gave none)"
    return out


def require_compared(check, fmt, out):
    """ExportMismatch where the comparison found a difference no rule explains, or compared nothing."""
    from .verify import ExportMismatch

    if check.get("problem"):
        raise ExportMismatch(f"export verification failed: {fmt} detections differ from PyTorch {check['problem']} "
                             f"({out} kept for inspection)")
    if not check.get("compared_detections"):
        thresh = f"score threshold {check['score_thresh']:g}"
        if "model_score_thresh" in check:
            thresh += f" (lowered from the model's {check['model_score_thresh']:g})"
        found = "detects nothing"
        if check.get("left_out"):  # every detection on one side or the other of a cut, none pairs
            why = ", ".join(f"{rule}: {n}" for rule, n in sorted(check["left_out_by"].items()))
            found = f"gives only detections at a cut, which may fall either way ({why})"
        hint = "" if "model_score_thresh" in check else (
            "; an end-to-end or TorchScript file has its threshold inside: --form raw is verified at lower ones")
        raise ExportMismatch(f"export verification compared no detections: the model {found} on {check['images']} "
                             f"at {thresh}, so nothing was verified ({out} kept for inspection{hint})")
