"""Evaluation records gathered across ranks in bounded rounds: the chunk planning, and two gloo
processes on CPU whose gathered records (and COCO metrics) equal one process's."""
import os
import pickle
import random

import pytest
import torch.distributed as torch_dist
import torch.multiprocessing as mp

from up_trainer.engine.distributed import DistInfo, merge_rank_results, plan_chunks

N_SAMPLES = 23
CHUNK = 3  # tiny, so every scenario needs several rounds


@pytest.mark.parametrize("n, chunk, plan", [
    (0, 4, []),
    (1, 4, [(0, 1)]),
    (8, 4, [(0, 4), (4, 8)]),
    (9, 4, [(0, 4), (4, 8), (8, 9)]),
    (5, 1, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]),
    (5, None, [(0, 5)]),
    (0, None, []),
])
def test_chunk_plan_covers_every_record_once_in_order(n, chunk, plan):
    assert plan_chunks(n, chunk) == plan
    assert [i for start, stop in plan for i in range(start, stop)] == list(range(n))


def test_chunk_plan_rejects_an_empty_chunk():
    with pytest.raises(ValueError, match="chunk_records"):
        plan_chunks(3, 0)


def det_record(index):
    """A detection record as CocoEvaluator.process makes it (seeded by its index)."""
    rng = random.Random(index)
    gt = [[x, y, x + 20, y + 15] for x, y in ((rng.uniform(0, 40), rng.uniform(0, 30)) for _ in range(3))]
    dets = [[b[0] + rng.uniform(-3, 3), b[1] + rng.uniform(-3, 3), b[2], b[3]] for b in gt + gt[:1]]
    return {"index": index, "image_id": 100 + index, "height": 64, "width": 80,
            "gt_boxes": gt, "gt_labels": [rng.randint(1, 2) for _ in gt], "ignore_boxes": [],
            "boxes": dets, "scores": [rng.random() for _ in dets], "labels": [rng.randint(1, 2) for _ in dets],
            "_classes": ["a", "b"], "_cat_ids": [1, 2]}


def shards(rank, world):
    """Each scenario's records on ``rank``: a strided split, a padded one (repeats the first
    samples on the short rank), an uneven contiguous one (ranks need different round counts),
    one rank with nothing, and records without an index (interleaved back)."""
    everything = [det_record(i) for i in range(N_SAMPLES)]
    padded_len = -(-N_SAMPLES // world) * world
    padded = [everything[i % N_SAMPLES] for i in range(padded_len)]
    return {
        "strided": everything[rank::world],
        "padded": padded[rank::world],
        "uneven": everything[:17] if rank == 0 else everything[17:],
        "one_empty": everything if rank == 0 else [],
        "no_index": [{"sample": i} for i in range(N_SAMPLES)][rank::world],
    }


def _rank_main(rank, world, init_file, out_dir):
    torch_dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    sizes = []
    plain_gather = torch_dist.gather_object

    def counting_gather(obj, *args, **kwargs):  # what each collective carries from this rank
        sizes.append(len(obj))
        return plain_gather(obj, *args, **kwargs)

    torch_dist.gather_object = counting_gather
    try:
        dist, out = DistInfo(), {}
        for name, records in shards(rank, world).items():
            sizes.clear()
            chunked = dist.gather_results(records, chunk_records=CHUNK)
            out[name] = {"chunked": chunked, "sizes": list(sizes),
                         "one_round": dist.gather_results(records, chunk_records=None)}
        if rank == 0:
            from up_trainer.tasks.det.evaluator import CocoEvaluator

            out["metrics"] = CocoEvaluator(per_class=False).evaluate(out["strided"]["chunked"])
        with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
            pickle.dump(out, f)
    finally:
        torch_dist.gather_object = plain_gather
        torch_dist.destroy_process_group()


def test_two_ranks_gather_in_rounds_what_one_process_evaluates(tmp_path):
    world = 2
    mp.spawn(_rank_main, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world, join=True)
    main, other = (pickle.load(open(tmp_path / f"rank{r}.pkl", "rb")) for r in range(world))
    one_process = [det_record(i) for i in range(N_SAMPLES)]
    for name in ("strided", "padded", "uneven", "one_empty"):
        assert main[name]["chunked"] == one_process, name
    assert main["no_index"]["chunked"] == [{"sample": i} for i in range(N_SAMPLES)]
    for name in main:
        if name == "metrics":
            continue
        # same records, same order as everything in one round; only rank 0 holds them
        assert main[name]["chunked"] == main[name]["one_round"], name
        assert other[name]["chunked"] == [] and other[name]["one_round"] == []
        # no collective carried more than a chunk from a rank, and every rank took part in the
        # same number of rounds: as many as the rank with the most records needs
        rounds = max(-(-len(s[name]) // CHUNK) for s in (shards(0, world), shards(1, world)))
        for got in (main, other):
            assert len(got[name]["sizes"]) == rounds >= 2 and max(got[name]["sizes"]) <= CHUNK, name
    from up_trainer.tasks.det.evaluator import CocoEvaluator

    assert main["metrics"] == CocoEvaluator(per_class=False).evaluate(one_process)
    assert 0 < main["metrics"]["bbox.AP"] < 1


def test_merge_keeps_the_first_copy_in_rank_order():
    # a padded sampler's repeat may differ (e.g. its loss came from another batch): rank 0's wins,
    # as when everything was gathered at once
    first, repeat = {"index": 0, "loss": 1.0}, {"index": 0, "loss": 2.0}
    assert merge_rank_results([[first, {"index": 2}], [{"index": 1}, repeat]]) == [first, {"index": 1}, {"index": 2}]
