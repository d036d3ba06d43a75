"""Where a classifier fails, from the evaluator's per-sample records (label, pred, score).

Written to ``out_dir``: ``confusion_matrix.csv`` / ``.png`` (rows: true class, columns:
predicted), ``per_class.csv`` (precision, recall, support per class) and
``confidently_wrong.png`` (the ``num_wrong`` wrong predictions with the highest score, each
captioned ``pred score / true``). Precision of a class never predicted is 0 (and noted as
such by a support of predictions of 0 in the CSV).
"""
import os

import torch

from ..insight_io import Insight, confusion_figure, save_figure, write_csv


def confusion_matrix(records, num_classes):
    m = [[0] * num_classes for _ in range(num_classes)]
    for r in records:
        if r.get("label") is not None and 0 <= r["label"] < num_classes and 0 <= r["pred"] < num_classes:
            m[r["label"]][r["pred"]] += 1
    return m


def precision_recall(matrix):
    """[(precision, recall, support, predicted)] per class from a confusion matrix."""
    n = len(matrix)
    out = []
    for k in range(n):
        tp = matrix[k][k]
        support = sum(matrix[k])
        predicted = sum(matrix[i][k] for i in range(n))
        out.append((tp / predicted if predicted else 0.0, tp / support if support else 0.0, support, predicted))
    return out


def _class_names(dataset, records):
    names = list(getattr(dataset, "classes", None) or [])
    n = max([len(names)] + [max(r["pred"], r["label"] if r.get("label") is not None else 0) + 1 for r in records])
    return names + [str(i) for i in range(len(names), n)]


def _wrong_sheet(records, dataset, names, num_wrong, min_side=96):
    from ...render import draw_caption, enlarge, grid, to_uint8

    wrong = [r for r in records if r.get("label") is not None and r["pred"] != r["label"]]
    wrong.sort(key=lambda r: (-r["score"], r["index"]))
    panels = []
    for r in wrong[:num_wrong]:
        image = dataset[r["index"]]["image"]
        base, _ = enlarge(to_uint8(image), min_side)
        panels.append(draw_caption(base, f"{names[r['pred']]} {r['score']:.2f} / {names[r['label']]}", "#e6194b"))
    return grid(panels, ncol=min(8, len(panels))) if panels else None


def write_insight(records, out_dir, dataset=None, num_wrong=16):
    """Unique per-sample records -> files in ``out_dir`` and an :class:`Insight`."""
    from ...render import save_png

    names = _class_names(dataset, records)
    matrix = confusion_matrix(records, len(names))
    result = Insight()
    result.files.append(write_csv(os.path.join(out_dir, "confusion_matrix.csv"), ["true \\ predicted"] + names,
                                  [[names[i]] + row for i, row in enumerate(matrix)]))
    path = os.path.join(out_dir, "confusion_matrix.png")
    result.images["insight/confusion_matrix"] = save_figure(
        confusion_figure(matrix, names, names, f"confusion matrix ({sum(map(sum, matrix))} samples)"), path)
    result.files.append(path)
    rows = []
    for name, (p, r, support, predicted) in zip(names, precision_recall(matrix)):
        rows.append([name, round(p, 6), round(r, 6), support, predicted])
        result.scalars[f"insight/precision/{name}"] = p
        result.scalars[f"insight/recall/{name}"] = r
    result.files.append(write_csv(os.path.join(out_dir, "per_class.csv"),
                                  ["class", "precision", "recall", "support", "predicted"], rows))
    if dataset is not None and num_wrong > 0:
        sheet = _wrong_sheet(records, dataset, names, num_wrong)
        path = os.path.join(out_dir, "confidently_wrong.png")
        if sheet is not None:
            save_png(sheet, path)
            result.images["insight/confidently_wrong"] = sheet
            result.files.append(path)
        elif os.path.exists(path):
            os.remove(path)  # no wrong prediction this time: an older sheet would mislead
    return result


def per_sample_loss(logits, labels):
    """Cross-entropy per sample (the validation loss; label smoothing left out)."""
    return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
