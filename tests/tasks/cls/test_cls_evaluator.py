"""Top-k evaluator: exact numbers on hand-made logits, de-duplication, results file."""
import json
import pickle

import pytest
import torch

from up_trainer.errors import ConfigError
from up_trainer.registry import EVALUATORS
from up_trainer.tasks.cls.evaluator import TopKAccuracy


def mean_ce(logits, labels):
    return float(torch.nn.functional.cross_entropy(logits, torch.tensor(labels)))


def batch_of(indices, labels=None):
    b = {"index": torch.tensor(indices)}
    if labels is not None:
        b["label"] = torch.tensor(labels)
    return b


# Six classes; each row's class ranking is spelled out so top-k hits are known exactly.
LOGITS = torch.tensor([
    [9.0, 8, 7, 6, 5, 4],   # label 0: rank 1
    [9.0, 8, 7, 6, 5, 4],   # label 2: rank 3
    [1.0, 2, 3, 4, 5, 6],   # label 1: rank 5
    [1.0, 2, 3, 4, 5, 6],   # label 0: rank 6 (outside top-5)
])
LABELS = [0, 2, 1, 0]


def test_topk_exact_on_hand_made_logits():
    ev = TopKAccuracy(topk=[1, 5])
    ev.process(batch_of([0, 1], LABELS[:2]), {"logits": LOGITS[:2]})
    ev.process(batch_of([2, 3], LABELS[2:]), {"logits": LOGITS[2:]})
    metrics = ev.evaluate(ev.results())
    assert metrics == {"top1": 25.0, "top5": 75.0, "num_samples": 4, "val_loss": pytest.approx(mean_ce(LOGITS, LABELS))}


def test_topk_three_uses_the_ranking():
    ev = TopKAccuracy(topk=[3])
    ev.process(batch_of([0, 1, 2, 3], LABELS), {"logits": LOGITS})
    assert ev.evaluate(ev.results())["top3"] == 50.0
    assert ev.primary_metric == "top3" and ev.metric_keys() == ["top3", "num_samples", "val_loss"]


def test_topk_larger_than_num_classes_is_clamped():
    ev = TopKAccuracy(topk=[1, 5])
    logits = torch.tensor([[3.0, 1, 2], [0.0, 5, 1]])
    ev.process(batch_of([0, 1], [2, 1]), {"logits": logits})
    assert ev.evaluate(ev.results()) == {"top1": 50.0, "top5": 100.0, "num_samples": 2,
                                         "val_loss": pytest.approx(mean_ce(logits, [2, 1]))}


def test_scores_are_used_when_present():
    ev = TopKAccuracy(topk=[1])
    scores = torch.tensor([[0.1, 0.9], [0.8, 0.2]])
    ev.process(batch_of([0, 1], [1, 1]), {"logits": -scores, "scores": scores})
    rec = ev.results()
    assert [r["pred"] for r in rec] == [1, 0]
    assert rec[0]["score"] == pytest.approx(0.9)
    assert ev.evaluate(rec)["top1"] == 50.0


def test_results_are_small_picklable_and_deduplicated_by_index():
    ev = TopKAccuracy()
    ev.process(batch_of([0, 1], LABELS[:2]), {"logits": LOGITS[:2]})
    ev.process(batch_of([1], LABELS[1:2]), {"logits": LOGITS[1:2]})  # padded repeat of sample 1
    results = pickle.loads(pickle.dumps(ev.results()))
    assert len(results) == 3 and all("index" in r for r in results)
    assert all(isinstance(v, (int, float, list, type(None))) for r in results for v in r.values())
    assert ev.evaluate(results) == {"top1": 50.0, "top5": 100.0, "num_samples": 2,  # sample 1 counted once
                                    "val_loss": pytest.approx(mean_ce(LOGITS[:2], LABELS[:2]))}
    ev.reset()
    assert ev.results() == []
    assert ev.evaluate([])["num_samples"] == 0


def test_unlabeled_samples_are_kept_but_not_scored():
    ev = TopKAccuracy()
    ev.process(batch_of([0, 1]), {"logits": LOGITS[:2]})
    assert [r["label"] for r in ev.results()] == [None, None]
    assert ev.evaluate(ev.results())["num_samples"] == 0


def test_write_results_jsonl(tmp_path):
    ev = TopKAccuracy(topk=[1, 2])
    ev.process(batch_of([3, 1], [0, 5]), {"logits": LOGITS[2:4].flip(0)})
    path = tmp_path / "res" / "results.jsonl"
    ev.write_results(ev.results(), str(path))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["index"] for r in rows] == [1, 3]
    assert rows[0]["label"] == 5 and rows[0]["pred"] == 5 and rows[0]["topk"] == [5, 4]
    assert 0.0 < rows[0]["score"] <= 1.0


def test_registry_names_and_kwargs():
    ev = EVALUATORS.build({"type": "imagenet", "kwargs": {"topk": [1, 5]}}, "dataset.evaluator")
    assert ev.primary_metric == "top1" and ev.metric_keys() == ["top1", "top5", "num_samples", "val_loss"]
    assert isinstance(EVALUATORS.build({"type": "accuracy"}, "dataset.evaluator"), TopKAccuracy)
    for bad in ([0], "top1", [1.5], []):
        with pytest.raises(ConfigError) as exc:
            EVALUATORS.build({"type": "imagenet", "kwargs": {"topk": bad}}, "dataset.evaluator")
        assert exc.value.path == "dataset.evaluator.kwargs.topk"


def test_model_outputs_feed_the_evaluator():
    from up_trainer.registry import MODELS

    torch.manual_seed(0)
    torch.set_num_threads(1)  # a tiny forward: one thread, immune to a busy machine
    model = MODELS.build({"type": "resnet18", "kwargs": {"num_classes": 3, "small_input": True}}, "net").eval()
    ev = TopKAccuracy()
    batch = {"image": torch.rand(2, 3, 8, 8), "label": torch.tensor([0, 2]), "index": torch.tensor([0, 1])}
    with torch.no_grad():
        out = model(batch)
    ev.process(batch, out)
    assert [r["pred"] for r in ev.results()] == out["preds"].tolist()
