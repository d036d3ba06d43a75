"""UP's multi-head classification (``num_classes: [a, b, ...]`` on base_cls_head, a list label
per record in a custom_cls meta file): the class counts checked head by head, and top-k
accuracy per head.

Metrics, as UP's ``imagenet`` evaluator names them for several heads: ``head{i}.top{k}`` per
head and ``avg_top{k}``, their mean over the heads (the primary metric: ``avg_top{first k}``,
UP's compare key); ``val_loss`` is the mean over heads of each head's cross-entropy.
"""
import torch
import torch.nn.functional as F

from ...errors import ConfigError, DataError


def head_counts(labeled, classes, num_classes, meta_file):
    """Per-head class counts (largest label + 1) of list labels, ``labeled``: (label, line)
    pairs; every labeled record must give one class per head."""
    first, first_line = labeled[0]
    heads = len(first) if isinstance(first, tuple) else 1
    for label, lineno in labeled:
        if not isinstance(label, tuple) or len(label) != heads:
            got = f"{len(label)} labels" if isinstance(label, tuple) else "a single label"
            raise DataError(f"{meta_file}:{lineno}: {got}, but line {first_line} gives {heads} (one class per "
                            "classifier head; every record needs the same number)")
    if classes is not None or num_classes is not None:
        raise ConfigError("num_classes", "list labels (one per classifier head) take their class counts from the "
                          "net's num_classes list; remove classes / num_classes from the dataset")
    return [max(label[h] for label, _ in labeled) + 1 for h in range(heads)]


def check_head_counts(predicted, key, datasets):
    """The net's per-head class counts against each dataset's (list labels: one per head)."""
    for path, dataset in datasets:
        held = getattr(dataset, "num_classes", None)
        if held is None:
            continue
        if not isinstance(predicted, list):
            raise ConfigError(key, f"{path} has a list label per image ({len(held)} heads) but the net has one "
                              "classifier", f"give one class count per head: {key}: {held}")
        if not isinstance(held, list):
            raise ConfigError(key, f"the net has {len(predicted)} classifier heads but {path} has one label per "
                              "image", "give a list label per record (custom_cls: \"label\": [a, b])")
        if len(held) != len(predicted):
            raise ConfigError(key, f"the net has {len(predicted)} classifier heads but {path}'s labels have "
                              f"{len(held)} entries")
        for i, (n, h) in enumerate(zip(predicted, held)):
            if h > n:
                raise ConfigError(key, f"head {i} predicts {n} classes but {path} has label {h - 1} for it",
                                  f"set {key}: {[max(a, b) for a, b in zip(predicted, held)]}")


def records(batch, outputs, topk):
    """Per-sample records of one batch for several heads: label, pred, score and top-k per head."""
    scores = outputs.get("scores")
    if scores is None:
        scores = [x.float().softmax(dim=1) for x in outputs["logits"]]
    scores = [s.detach().float().cpu() for s in scores]
    tops = [s.topk(min(max(topk), s.shape[1]), dim=1) for s in scores]
    indices = batch["index"]
    indices = indices.tolist() if isinstance(indices, torch.Tensor) else list(indices)
    label = batch.get("label")
    losses = None
    if isinstance(label, torch.Tensor):
        logits = outputs["logits"]
        label = label.to(logits[0].device)
        losses = torch.stack([F.cross_entropy(x.detach().float(), label[:, h], reduction="none")
                              for h, x in enumerate(logits)]).mean(0).tolist()
        label = label.tolist()
    out = []
    for i, index in enumerate(indices):
        rec = {"index": int(index), "label": None if label is None else [int(v) for v in label[i]],
               "pred": [int(t.indices[i, 0]) for t in tops], "score": [float(t.values[i, 0]) for t in tops],
               "topk": [t.indices[i].tolist() for t in tops]}
        if losses is not None:
            rec["loss"] = float(losses[i])
        out.append(rec)
    return out


def evaluate(results, topk, heads):
    unique = {r["index"]: r for r in results}
    labeled = [r for r in unique.values() if r["label"] is not None]
    if any(len(r["label"]) != heads for r in labeled):
        raise DataError(f"the evaluation labels do not have one entry per classifier head ({heads})")
    n = len(labeled)
    metrics = {}
    for k in topk:
        per_head = []
        for h in range(heads):
            hits = sum(1 for r in labeled if r["label"][h] in r["topk"][h][:k])
            metrics[f"head{h}.top{k}"] = 100.0 * hits / n if n else 0.0
            per_head.append(metrics[f"head{h}.top{k}"])
        metrics[f"avg_top{k}"] = sum(per_head) / heads
    metrics["num_samples"] = n
    losses = [r["loss"] for r in sorted(labeled, key=lambda r: r["index"]) if "loss" in r]
    if losses:
        metrics["val_loss"] = sum(losses) / len(losses)
    return metrics


def metric_keys(topk, heads):
    return ([f"head{h}.top{k}" for k in topk for h in range(heads)] + [f"avg_top{k}" for k in topk]
            + ["num_samples", "val_loss"])
