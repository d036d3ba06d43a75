"""Top-k accuracy (UP's ``imagenet`` evaluator; alias ``accuracy``) and ``val_loss``, the mean
cross-entropy of the labeled samples (without the model's label smoothing).

The trainer calls reset(), process(batch, outputs) per batch, gathers results() from every
rank, de-duplicates them by ``index`` and calls evaluate(results). Per-sample records are
small CPU python data, so gathering them across processes is cheap and picklable.
"""
import json
import os

import torch

from ...errors import ConfigError
from ...registry import EVALUATORS


@EVALUATORS.register("imagenet", aliases=("accuracy",))
class TopKAccuracy:
    """top-k accuracy in percent for every k in topk (k above the class count is clamped)."""

    def __init__(self, topk: list = (1, 5)):
        topk = list(topk)
        if not topk or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in topk):
            raise ConfigError("topk", f"expected a list of positive integers, got {topk!r}")
        self.topk = sorted(set(topk))
        self.primary_metric = f"top{self.topk[0]}" if 1 not in self.topk else "top1"
        self._records = []
        self.save_scores = False  # UP's dataset kwarg save_score: every class score in the results file
        self.heads = None  # several classifier heads (UP's multi-head form): see multi_head.py

    def set_heads(self, heads):
        """Evaluate ``heads`` classifier heads (list labels): metrics per head and their mean."""
        self.heads = heads
        self.primary_metric = f"avg_top{self.topk[0]}" if 1 not in self.topk else "avg_top1"

    def metric_keys(self):
        if self.heads:
            from .multi_head import metric_keys

            return metric_keys(self.topk, self.heads)
        return [f"top{k}" for k in self.topk] + ["num_samples", "val_loss"]

    def reset(self):
        self._records = []

    @torch.no_grad()
    def process(self, batch, outputs):
        if self.heads:
            from .multi_head import records

            self._records += records(batch, outputs, self.topk)
            return
        scores = outputs.get("scores")
        if scores is None:
            scores = outputs["logits"].float().softmax(dim=1)
        scores = scores.detach().float().cpu()
        k = min(max(self.topk), scores.shape[1])
        top_scores, top_idx = scores.topk(k, dim=1)
        indices = batch["index"]
        indices = indices.tolist() if isinstance(indices, torch.Tensor) else list(indices)
        label_tensor = batch.get("label")
        labels = label_tensor.tolist() if isinstance(label_tensor, torch.Tensor) else [None] * len(indices)
        losses = [None] * len(indices)
        if isinstance(label_tensor, torch.Tensor) and outputs.get("logits") is not None:
            from .insight import per_sample_loss

            losses = per_sample_loss(outputs["logits"].detach(), label_tensor.to(outputs["logits"].device)).tolist()
        for i, index in enumerate(indices):
            record = {
                "index": int(index),
                "label": None if labels[i] is None else int(labels[i]),
                "pred": int(top_idx[i, 0]),
                "score": float(top_scores[i, 0]),
                "topk": top_idx[i].tolist(),
            }
            if losses[i] is not None:
                record["loss"] = float(losses[i])
            if self.save_scores:
                record["scores"] = scores[i].tolist()
            self._records.append(record)

    def results(self):
        return list(self._records)

    def evaluate(self, results):
        if self.heads:
            from .multi_head import evaluate

            return evaluate(results, self.topk, self.heads)
        # De-duplicated here too: a padded distributed sampler may repeat samples.
        unique = {r["index"]: r for r in results}
        labeled = [r for r in unique.values() if r["label"] is not None]
        n = len(labeled)
        metrics = {}
        for k in self.topk:
            hits = sum(1 for r in labeled if r["label"] in r["topk"][:k])
            metrics[f"top{k}"] = 100.0 * hits / n if n else 0.0
        metrics["num_samples"] = n
        # In index order: the same sum whatever order the ranks' records arrived in.
        losses = [r["loss"] for r in sorted(labeled, key=lambda r: r["index"]) if "loss" in r]
        if losses:
            metrics["val_loss"] = sum(losses) / len(losses)
        return metrics

    def insight(self, results, out_dir, dataset=None, num_wrong=16):
        """Confusion matrix, per-class precision/recall, the most confidently wrong images
        (see :mod:`.insight`)."""
        from .insight import write_insight

        if self.heads:
            raise ConfigError("eval_insight", "per-class insight reads one label per image; this run has "
                              f"{self.heads} classifier heads")
        unique = [r for _, r in sorted({r["index"]: r for r in results}.items())]
        return write_insight(unique, out_dir, dataset, num_wrong)

    def write_results(self, results, path):
        """One JSON object per sample, ordered by index: index, label, pred, score, topk."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        unique = {r["index"]: r for r in results}
        with open(path, "w", encoding="utf-8") as f:
            for index in sorted(unique):
                f.write(json.dumps(unique[index]) + "\n")


@EVALUATORS.register("imagenet_lt")
class LongTailAccuracy(TopKAccuracy):
    """UP's ``imagenet_lt``: top-k accuracy plus the mean per-class top-k accuracy of the
    many-shot (more than ``many_shot_thr`` training images), median-shot (between the two
    thresholds, inclusive) and low-shot (fewer than ``low_shot_thr``) classes. ``cls_freq``: a
    JSON list of training-image counts per class, read when the run starts. Classes absent
    from the evaluation set do not count; a group with no class present is left out."""

    GROUPS = ("many", "median", "low")

    def __init__(self, topk: list = (1, 5), cls_freq: str = "", many_shot_thr: int = 100, low_shot_thr: int = 20):
        super().__init__(topk)
        if not isinstance(cls_freq, str) or not cls_freq:
            raise ConfigError("cls_freq", "required: a JSON file listing the training images per class")
        if low_shot_thr > many_shot_thr:
            raise ConfigError("low_shot_thr", f"{low_shot_thr} is above many_shot_thr {many_shot_thr}")
        self.cls_freq_file, self.many, self.low = cls_freq, many_shot_thr, low_shot_thr
        self.cls_freq = None

    def load_files(self):
        """Read ``cls_freq`` (called when the run starts, so a bad file stops it before training)."""
        from ...errors import DataError

        from ...paths import open_input  # the one opener of user-named files: a regular file or one line

        try:
            with open_input(self.cls_freq_file, "cls_freq file", DataError, text=True) as f:
                freq = json.load(f)
        except (OSError, ValueError) as exc:
            raise DataError(f"cls_freq {self.cls_freq_file}: cannot read a JSON list of class counts ({exc})") from None
        if not isinstance(freq, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in freq):
            raise DataError(f"cls_freq {self.cls_freq_file}: expected a JSON list of integers (images per class)")
        self.cls_freq = freq

    def set_heads(self, heads):
        raise ConfigError("dataset.evaluator.type", f"imagenet_lt groups one label per image; this run has {heads} "
                          "classifier heads", "use imagenet")

    def metric_keys(self):
        return super().metric_keys() + [f"{g}_shot_acc_top{k}" for k in self.topk for g in self.GROUPS]

    def group_of(self, label):
        n = self.cls_freq[label]
        return "many" if n > self.many else "low" if n < self.low else "median"

    def evaluate(self, results):
        from ...errors import DataError

        if self.cls_freq is None:
            self.load_files()
        metrics = super().evaluate(results)
        labeled = [r for r in {r["index"]: r for r in results}.values() if r["label"] is not None]
        if any(r["label"] >= len(self.cls_freq) for r in labeled):
            raise DataError(f"cls_freq {self.cls_freq_file}: {len(self.cls_freq)} classes, but the evaluation "
                            f"set has label {max(r['label'] for r in labeled)}")
        for k in self.topk:
            per_class = {}
            for r in labeled:
                per_class.setdefault(r["label"], []).append(r["label"] in r["topk"][:k])
            for group in self.GROUPS:
                accs = [100.0 * sum(hits) / len(hits) for label, hits in sorted(per_class.items())
                        if self.group_of(label) == group]
                if accs:
                    metrics[f"{group}_shot_acc_top{k}"] = sum(accs) / len(accs)
        return metrics
